//! REAR wire models (filled in next).
