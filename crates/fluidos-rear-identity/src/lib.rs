//! A FLUIDOS node's REAR identity.
//!
//! Each node has one long-lived key pair ([`NodeKey`]), kept in a Secret in
//! its namespace and created on first start ([`secret::load_or_create`]). A
//! peer is known by the [`Fingerprint`] of that key's public half, as
//! Syncthing knows devices, not by what it writes in a request body. The
//! certificate a node presents is self-signed and derived from the key at
//! start; only the key matters, so certificates need no CA, no renewal and
//! no names.
//!
//! [`tls`] builds the rustls configurations: a server that asks for (and
//! reports) its client's fingerprint, and a client that presents the node's
//! certificate and accepts only the provider whose fingerprint it expects.

pub mod fingerprint;
pub mod key;
pub mod published;
pub mod secret;
pub mod tls;

pub use fingerprint::Fingerprint;
pub use key::NodeKey;
