//! Wall-clock timestamps in the ledger's RFC 3339 shape: the node-wide ones.

pub(crate) use fluidos_controller::time::{
    expiry_after, expiry_at, format, is_past, is_past_by, now_string,
};
