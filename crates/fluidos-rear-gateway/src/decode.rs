//! Request body decoding with errors that name the offending JSON field.

use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// Decodes a JSON body; errors are 400 with the dotted path of the bad field.
pub fn json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request(
            "empty request body; a JSON object is required",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let field = if path == "." { String::new() } else { path };
        ApiError::bad_request(format!("invalid JSON body: {inner}")).field(field)
    })?;
    de.end()
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))?;
    Ok(value)
}

/// Like [`json`], but an empty body means `T::default()` (a purchase needs no body).
pub fn json_or_default<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    json(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use fluidos_api::rear::{PurchaseRequest, ReserveRequest};

    use super::*;

    #[test]
    fn errors_name_the_field() {
        let e = json::<ReserveRequest>(br#"{"flavorID":"f","buyerID":{"ID":7}}"#).unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(e.body.field.as_deref(), Some("buyerID.ID"));
        let e = json::<ReserveRequest>(br#"{"flavorID":"f"}"#).unwrap_err();
        assert!(e.body.error.contains("buyerID"), "{e:?}");
        let e = json::<ReserveRequest>(b"{").unwrap_err();
        assert_eq!(e.status, 400);
        let e = json::<ReserveRequest>(br#"{"flavorID":"f","buyerID":{}} x"#).unwrap_err();
        assert!(e.body.error.contains("trailing"), "{e:?}");
        assert_eq!(json::<ReserveRequest>(b"  ").unwrap_err().status, 400);
    }

    #[test]
    fn empty_purchase_body_is_default() {
        assert_eq!(
            json_or_default::<PurchaseRequest>(b"").unwrap(),
            PurchaseRequest::default()
        );
        assert_eq!(
            json_or_default::<PurchaseRequest>(b"{}").unwrap(),
            PurchaseRequest::default()
        );
    }
}
