//! What an API-server error means for the caller.

/// What an API-server error means for the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiErrorKind {
    /// 404: the object (or its namespace) does not exist.
    NotFound,
    /// 409 on a write: our view of the object was stale.
    Conflict,
    /// 409 on a create: the name is taken.
    AlreadyExists,
    /// 400/422: the request itself is wrong; retrying it unchanged cannot help.
    Invalid,
    /// 401/403: missing credentials or RBAC.
    Forbidden,
    /// 429: the API server asks us to slow down.
    Throttled,
    /// 5xx, or the API server could not be reached at all.
    Unavailable,
    /// Anything else (decoding errors, configuration, ...).
    Other,
}

impl ApiErrorKind {
    /// True when the same request may succeed later without anything else changing.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            ApiErrorKind::Conflict | ApiErrorKind::Throttled | ApiErrorKind::Unavailable
        )
    }

    /// A short snake_case name, e.g. for a log field or a metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ApiErrorKind::NotFound => "not_found",
            ApiErrorKind::Conflict => "conflict",
            ApiErrorKind::AlreadyExists => "already_exists",
            ApiErrorKind::Invalid => "invalid",
            ApiErrorKind::Forbidden => "forbidden",
            ApiErrorKind::Throttled => "throttled",
            ApiErrorKind::Unavailable => "unavailable",
            ApiErrorKind::Other => "other",
        }
    }
}

impl std::fmt::Display for ApiErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Classifies a status answer from its HTTP code and reason (pure).
pub fn classify_status(code: u16, reason: &str) -> ApiErrorKind {
    match code {
        404 => ApiErrorKind::NotFound,
        409 if reason == "AlreadyExists" => ApiErrorKind::AlreadyExists,
        409 => ApiErrorKind::Conflict,
        400 | 422 => ApiErrorKind::Invalid,
        401 | 403 => ApiErrorKind::Forbidden,
        429 => ApiErrorKind::Throttled,
        500..=599 => ApiErrorKind::Unavailable,
        _ => ApiErrorKind::Other,
    }
}

/// What `e` means for the caller.
pub fn classify(e: &kube::Error) -> ApiErrorKind {
    match e {
        kube::Error::Api(s) => classify_status(s.code, &s.reason),
        // The request never got an answer: connection refused, reset, timeout.
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
            ApiErrorKind::Unavailable
        }
        _ => ApiErrorKind::Other,
    }
}

/// True for a 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    classify(e) == ApiErrorKind::NotFound
}

/// True for a 403: the caller may not.
pub fn is_forbidden(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403)
}

/// True for a 409 that is not `AlreadyExists`: a write on a stale read.
pub fn is_conflict(e: &kube::Error) -> bool {
    classify(e) == ApiErrorKind::Conflict
}

/// True for a 409 `AlreadyExists`: a create whose name is taken.
pub fn is_already_exists(e: &kube::Error) -> bool {
    classify(e) == ApiErrorKind::AlreadyExists
}

/// `Ok(None)` for a 404, the result otherwise.
pub fn ok_if_not_found<T>(r: Result<T, kube::Error>) -> Result<Option<T>, kube::Error> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Status::failure("m", reason).with_code(code).boxed())
    }

    #[test]
    fn status_codes() {
        use ApiErrorKind::*;
        for (code, reason, kind) in [
            (404, "NotFound", NotFound),
            (409, "Conflict", Conflict),
            (409, "", Conflict),
            (409, "AlreadyExists", AlreadyExists),
            (422, "Invalid", Invalid),
            (400, "BadRequest", Invalid),
            (403, "Forbidden", Forbidden),
            (401, "Unauthorized", Forbidden),
            (429, "TooManyRequests", Throttled),
            (500, "InternalError", Unavailable),
            (503, "ServiceUnavailable", Unavailable),
            (504, "Timeout", Unavailable),
            (410, "Expired", Other),
        ] {
            assert_eq!(classify(&api(code, reason)), kind, "{code} {reason}");
        }
    }

    #[test]
    fn retryable_and_predicates() {
        assert!(ApiErrorKind::Conflict.is_retryable());
        assert!(ApiErrorKind::Throttled.is_retryable());
        assert!(ApiErrorKind::Unavailable.is_retryable());
        assert!(!ApiErrorKind::NotFound.is_retryable());
        assert!(!ApiErrorKind::Invalid.is_retryable());
        assert!(!ApiErrorKind::Forbidden.is_retryable());
        assert!(is_not_found(&api(404, "NotFound")));
        assert!(is_conflict(&api(409, "Conflict")));
        assert!(!is_conflict(&api(409, "AlreadyExists")));
        assert!(is_already_exists(&api(409, "AlreadyExists")));
        assert_eq!(ApiErrorKind::AlreadyExists.as_str(), "already_exists");
        let transport = kube::Error::Service("connection refused".into());
        assert_eq!(classify(&transport), ApiErrorKind::Unavailable);
    }

    #[test]
    fn not_found_becomes_none() {
        assert_eq!(ok_if_not_found(Ok::<_, kube::Error>(1)).ok(), Some(Some(1)));
        assert!(matches!(
            ok_if_not_found::<()>(Err(api(404, "NotFound"))),
            Ok(None)
        ));
        assert!(ok_if_not_found::<()>(Err(api(409, "Conflict"))).is_err());
    }
}
