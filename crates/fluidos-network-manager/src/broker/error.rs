//! Why a broker connection is not up, one variant per step, each with its
//! source; [`BrokerError::reason`] is the Broker status reason and metric label.

use std::time::Duration;

use super::spec::SpecError;
use super::tls::SecretError;

/// Why a broker client is not connected.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// The Broker spec cannot work (fixed by editing it).
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A certificate Secret is missing or wrong.
    #[error(transparent)]
    Secret(#[from] SecretError),
    /// TLS, SASL EXTERNAL or the AMQP handshake failed.
    #[error("connecting to {endpoint}: {source}")]
    Connect {
        /// `host:port`.
        endpoint: String,
        /// lapin's error (its source chain has the TLS or AMQP detail).
        #[source]
        source: lapin::Error,
    },
    /// No connection within the timeout.
    #[error("connecting to {endpoint}: no connection within {timeout:?}")]
    ConnectTimeout {
        /// `host:port`.
        endpoint: String,
        /// The timeout.
        timeout: Duration,
    },
    /// Opening the channel, enabling confirms or the prefetch window failed.
    #[error("{step}: {source}")]
    Channel {
        /// `opening a channel`, `enabling publisher confirms`, ...
        step: &'static str,
        /// lapin's error.
        #[source]
        source: lapin::Error,
    },
    /// The queue named after the certificate's CN cannot be consumed (the
    /// broker's administrator creates it with the user).
    #[error("consuming queue {queue:?} (named after the client certificate's CN): {source}")]
    Consume {
        /// Queue name.
        queue: String,
        /// lapin's error.
        #[source]
        source: lapin::Error,
    },
    /// Publishing failed (e.g. the exchange does not exist).
    #[error("publishing to {exchange}: {source}")]
    Publish {
        /// Exchange.
        exchange: &'static str,
        /// lapin's error.
        #[source]
        source: lapin::Error,
    },
    /// The connection broke.
    #[error("connection lost: {0}")]
    Lost(#[source] lapin::Error),
    /// The broker cancelled the consumer (e.g. its queue was deleted).
    #[error("the broker cancelled the consumer of queue {0:?}")]
    ConsumerCancelled(String),
}

impl BrokerError {
    /// The Broker status reason (and `fluidos_broker_connects` label).
    pub fn reason(&self) -> &'static str {
        match self {
            BrokerError::Spec(_) => "InvalidSpec",
            BrokerError::Secret(e) => e.reason(),
            BrokerError::Connect { source, .. } => classify(source),
            BrokerError::ConnectTimeout { .. } => "Unreachable",
            BrokerError::Channel { .. } => "ChannelFailed",
            BrokerError::Consume { .. } => "QueueUnavailable",
            BrokerError::Publish { .. } => "PublishFailed",
            BrokerError::Lost(_) | BrokerError::ConsumerCancelled(_) => "ConnectionLost",
        }
    }

    /// The message and its whole source chain, for the status and logs.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            let more = s.to_string();
            if !text.contains(&more) {
                text.push_str(": ");
                text.push_str(&more);
            }
            source = s.source();
        }
        text
    }
}

/// What a failed connection attempt says about whose fault it is.
fn classify(error: &lapin::Error) -> &'static str {
    if let Some(tls) = find_rustls(error) {
        return match tls {
            // The broker refused our certificate (unknown CA, expired, ...).
            rustls::Error::AlertReceived(_) => "TlsRefused",
            // We refused the broker's (not signed by the Secret's CA, or
            // not for `spec.address`).
            rustls::Error::InvalidCertificate(_) => "ServerCertificateRejected",
            _ => "TlsFailed",
        };
    }
    match error.kind() {
        // ACCESS_REFUSED (403) for an unknown user, NOT_ALLOWED for a vhost.
        lapin::ErrorKind::ProtocolError(_) | lapin::ErrorKind::AuthProviderError(_) => {
            "AccessRefused"
        }
        lapin::ErrorKind::IOError(e) => match e.kind() {
            std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::TimedOut
            | std::io::ErrorKind::HostUnreachable
            | std::io::ErrorKind::NetworkUnreachable
            | std::io::ErrorKind::NotFound => "Unreachable",
            // A TLS 1.3 server refuses a client certificate after the
            // client's handshake ends, so the refusal may surface as the
            // connection closing during the AMQP handshake.
            std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe => "ClosedByBroker",
            _ => "ConnectFailed",
        },
        _ => "ConnectFailed",
    }
}

/// The rustls error somewhere in `error`'s source chain (inside io::Errors).
fn find_rustls(error: &lapin::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            if let Some(t) = inner.downcast_ref::<rustls::Error>() {
                return Some(t);
            }
            next = inner.source();
            continue;
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> lapin::Error {
        std::io::Error::from(kind).into()
    }

    #[test]
    fn tls_errors_say_whose_certificate_failed() {
        let refused: lapin::Error = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::UnknownCA),
        )
        .into();
        assert_eq!(classify(&refused), "TlsRefused");
        let rejected: lapin::Error = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        )
        .into();
        assert_eq!(classify(&rejected), "ServerCertificateRejected");
        let e = BrokerError::Connect {
            endpoint: "h:1".into(),
            source: rejected,
        };
        assert_eq!(e.reason(), "ServerCertificateRejected");
        assert!(e.chain().contains("UnknownIssuer"), "{}", e.chain());
    }

    #[test]
    fn socket_errors() {
        assert_eq!(
            classify(&io(std::io::ErrorKind::ConnectionRefused)),
            "Unreachable"
        );
        assert_eq!(
            classify(&io(std::io::ErrorKind::UnexpectedEof)),
            "ClosedByBroker"
        );
        assert_eq!(classify(&io(std::io::ErrorKind::Other)), "ConnectFailed");
    }
}
