//! A real RabbitMQ (Debian's `rabbitmq-server`) for one test: its own
//! directory, Erlang node name, ports and epmd, TLS only on loopback with a
//! generated CA, server and client certificates, SASL EXTERNAL
//! (`rabbitmq_auth_mechanism_ssl`, user = certificate CN), and the FLUIDOS
//! exchanges and per-client queues loaded from a definitions file.
//!
//! The FLUIDOS broker's router (which matches announcements against the
//! subscribers' rules) is not part of RabbitMQ; here `announcements_exchange`
//! is a fanout bound to every client's queue, i.e. a router whose rules
//! match everything.
//!
//! `tools/rabbitmq/install.sh` installs the server; [`RabbitMq::installed`]
//! tells tests whether to skip.

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::Error;

/// Debian's server script that runs the broker as the calling user (the
/// `/usr/sbin` wrapper switches to the `rabbitmq` user).
pub const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// How long a boot may take on a loaded 2-core machine.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// A CA that signs certificates.
pub struct Ca {
    /// The CA certificate (what a Broker's `CA_cert.pem` holds).
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    /// A new self-signed CA named `name`.
    pub fn new(name: &str) -> Result<Ca, Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key)?;
        Ok(Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// (certificate PEM, key PEM) for `cn`; a server certificate for
    /// localhost/127.0.0.1 when `server`.
    pub fn sign(&self, cn: &str, server: bool) -> Result<(String, String), Error> {
        let key = KeyPair::generate()?;
        let sans = if server {
            vec!["localhost".to_owned()]
        } else {
            vec![]
        };
        let mut params = CertificateParams::new(sans)?;
        if server {
            params
                .subject_alt_names
                .push(SanType::IpAddress([127, 0, 0, 1].into()));
        }
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![if server {
            ExtendedKeyUsagePurpose::ServerAuth
        } else {
            ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// A running (or stopped) broker; stopped and cleaned up on drop.
pub struct RabbitMq {
    dir: tempfile::TempDir,
    /// Its TLS port on 127.0.0.1 (a Broker's `address` is `127.0.0.1:<port>`).
    pub port: u16,
    dist_port: u16,
    epmd_port: u16,
    node_name: String,
    server: Option<Child>,
    epmd: Option<Child>,
    /// The CA that signed its certificate and trusts client certificates.
    pub ca: Ca,
}

impl RabbitMq {
    /// Whether the server is installed.
    pub fn installed() -> bool {
        Path::new(SERVER).exists()
    }

    /// Writes the configuration for `users` (each gets a queue bound to
    /// `announcements_exchange`) and starts the broker; returns once its TLS
    /// port accepts connections.
    pub async fn start(users: &[&str]) -> Result<RabbitMq, Error> {
        let dir = tempfile::Builder::new()
            .prefix("fluidos-rabbitmq-")
            .tempdir()
            .map_err(|e| Error::io("creating the RabbitMQ directory", e))?;
        let ca = Ca::new("fluidos-test-broker-ca")?;
        let (server_cert, server_key) = ca.sign("localhost", true)?;
        let p = |name: &str| dir.path().join(name);
        let write = |name: &str, text: &[u8]| {
            std::fs::write(p(name), text).map_err(|e| Error::io(format!("writing {name}"), e))
        };
        write("ca.pem", ca.cert_pem.as_bytes())?;
        write("server.pem", server_cert.as_bytes())?;
        write("server.key", server_key.as_bytes())?;
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(p(sub)).map_err(|e| Error::io(format!("creating {sub}"), e))?;
        }
        write("enabled_plugins", b"[rabbitmq_auth_mechanism_ssl].\n")?;
        write("rabbitmq-env.conf", b"")?;
        let definitions = serde_json::to_vec_pretty(&definitions(users))
            .map_err(|e| Error::Fixture(format!("RabbitMQ definitions: {e}")))?;
        write("definitions.json", &definitions)?;
        let port = crate::ports::free_port()?;
        let conf = format!(
            "listeners.tcp = none\n\
             listeners.ssl.1 = 127.0.0.1:{port}\n\
             ssl_options.cacertfile = {ca}\n\
             ssl_options.certfile = {cert}\n\
             ssl_options.keyfile = {key}\n\
             ssl_options.verify = verify_peer\n\
             ssl_options.fail_if_no_peer_cert = true\n\
             auth_mechanisms.1 = EXTERNAL\n\
             max_message_size = 65536\n\
             ssl_cert_login_from = common_name\n\
             load_definitions = {defs}\n",
            ca = p("ca.pem").display(),
            cert = p("server.pem").display(),
            key = p("server.key").display(),
            defs = p("definitions.json").display(),
        );
        write("rabbitmq.conf", conf.as_bytes())?;
        let suffix: String = dir
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("x")
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        let mut rabbit = RabbitMq {
            port,
            dist_port: crate::ports::free_port()?,
            epmd_port: crate::ports::free_port()?,
            node_name: format!("rabbit-{}@localhost", suffix.to_lowercase()),
            dir,
            server: None,
            epmd: None,
            ca,
        };
        rabbit.epmd = Some(
            Command::new("epmd")
                .args(["-port", &rabbit.epmd_port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .map_err(|e| Error::io("starting epmd", e))?,
        );
        rabbit.boot().await?;
        Ok(rabbit)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts the server process (again) and waits for its TLS port.
    pub async fn boot(&mut self) -> Result<(), Error> {
        if self.server.is_some() {
            return Err(Error::Fixture("RabbitMQ is already running".into()));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("server.out"))
            .map_err(|e| Error::io("opening the RabbitMQ log", e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| Error::io("opening the RabbitMQ log", e))?;
        let child = Command::new(SERVER)
            .env("HOME", self.path("home"))
            .env("RABBITMQ_CONF_ENV_FILE", self.path("rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", self.path("rabbitmq.conf"))
            .env(
                "RABBITMQ_ADVANCED_CONFIG_FILE",
                self.path("advanced.config"),
            )
            .env("RABBITMQ_MNESIA_BASE", self.path("mnesia"))
            .env("RABBITMQ_LOG_BASE", self.path("log"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                self.path("enabled_plugins"),
            )
            .env("RABBITMQ_NODENAME", &self.node_name)
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("ERL_EPMD_PORT", self.epmd_port.to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0)
            .spawn()
            .map_err(|e| Error::io(format!("starting {SERVER}"), e))?;
        self.server = Some(child);
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                eprintln!("RabbitMQ up after {:?}", started.elapsed());
                return Ok(());
            }
            if let Some(child) = self.server.as_mut()
                && let Ok(Some(exit)) = child.try_wait()
            {
                self.server = None;
                return Err(Error::ProcessExited {
                    name: "rabbitmq-server".into(),
                    status: exit.to_string(),
                    log: self.path("server.out"),
                    log_tail: self.log_tail(),
                });
            }
            if started.elapsed() > BOOT_TIMEOUT {
                return Err(Error::Timeout {
                    what: format!("RabbitMQ's TLS port {}", self.port),
                    waited: BOOT_TIMEOUT,
                    last_error: "connection refused".into(),
                    log_tail: self.log_tail(),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Kills the server's process group at once (a crash) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.server.take() {
            kill_group(&child, "KILL");
            let _ = child.wait();
        }
    }

    /// The last lines of the server's output and log, for failures.
    pub fn log_tail(&self) -> String {
        use std::fmt::Write as _;
        let mut text = String::new();
        let log = self.path("log").join(format!("{}.log", self.node_name));
        for f in [self.path("server.out"), log] {
            let s = std::fs::read_to_string(&f).unwrap_or_default();
            let lines: Vec<&str> = s.lines().collect();
            let from = lines.len().saturating_sub(30);
            let _ = writeln!(text, "--- {}\n{}", f.display(), lines[from..].join("\n"));
        }
        text
    }
}

impl Drop for RabbitMq {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("RabbitMQ logs:\n{}", self.log_tail());
        }
        if let Some(mut child) = self.server.take() {
            kill_group(&child, "TERM");
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            kill_group(&child, "KILL");
            let _ = child.wait();
        }
        if let Some(mut epmd) = self.epmd.take() {
            let _ = epmd.kill();
            let _ = epmd.wait();
        }
    }
}

/// Signals the whole process group (the server script starts Erlang
/// children that a signal to the script alone would orphan).
fn kill_group(child: &Child, signal: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
}

/// Users (no password: EXTERNAL only), their permissions, the two FLUIDOS
/// exchanges, one queue per user bound to announcements, and the queue the
/// router would read rules from.
fn definitions(users: &[&str]) -> serde_json::Value {
    use serde_json::json;
    let mut queues = vec![json!({
        "name": "rules_queue", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}
    })];
    let mut bindings = vec![json!({
        "source": "rules_exchange", "vhost": "/", "destination": "rules_queue",
        "destination_type": "queue", "routing_key": "", "arguments": {}
    })];
    for u in users {
        queues.push(json!({
            "name": u, "vhost": "/", "durable": true, "auto_delete": false, "arguments": {}
        }));
        bindings.push(json!({
            "source": "announcements_exchange", "vhost": "/", "destination": u,
            "destination_type": "queue", "routing_key": "", "arguments": {}
        }));
    }
    let exchange = |name: &str| {
        json!({
            "name": name, "vhost": "/", "type": "fanout", "durable": true,
            "auto_delete": false, "internal": false, "arguments": {}
        })
    };
    json!({
        "users": users.iter().map(|u| json!({
            "name": u, "password_hash": "",
            "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": []
        })).collect::<Vec<_>>(),
        "vhosts": [{"name": "/"}],
        "permissions": users.iter().map(|u| json!({
            "user": u, "vhost": "/", "configure": "^$", "write": ".*", "read": ".*"
        })).collect::<Vec<_>>(),
        "exchanges": [exchange("announcements_exchange"), exchange("rules_exchange")],
        "queues": queues,
        "bindings": bindings,
    })
}
