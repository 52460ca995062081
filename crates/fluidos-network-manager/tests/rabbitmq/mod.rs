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

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Debian's server script that runs the broker as the calling user (the
/// `/usr/sbin` wrapper switches to the `rabbitmq` user).
pub const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

/// How long a boot may take on a loaded 2-core machine.
const BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// A CA that signs certificates.
pub struct Ca {
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params.self_signed(&key).unwrap();
        Ca {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// (certificate PEM, key PEM) for `cn`; a server certificate for
    /// localhost/127.0.0.1 when `server`.
    pub fn sign(&self, cn: &str, server: bool) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let sans = if server {
            vec!["localhost".to_owned()]
        } else {
            vec![]
        };
        let mut params = CertificateParams::new(sans).unwrap();
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
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A running (or stopped) broker.
pub struct RabbitMq {
    dir: tempfile::TempDir,
    pub port: u16,
    dist_port: u16,
    epmd_port: u16,
    node_name: String,
    server: Option<Child>,
    epmd: Option<Child>,
    pub ca: Ca,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RabbitMq {
    /// Whether the server is installed.
    pub fn installed() -> bool {
        Path::new(SERVER).exists()
    }

    /// Writes the configuration for `users` (each gets a queue bound to
    /// `announcements_exchange`) and starts the broker; returns once its TLS
    /// port accepts connections.
    pub async fn start(users: &[&str]) -> RabbitMq {
        let dir = tempfile::Builder::new()
            .prefix("fluidos-rabbitmq-")
            .tempdir()
            .unwrap();
        let ca = Ca::new("fluidos-test-broker-ca");
        let (server_cert, server_key) = ca.sign("localhost", true);
        let p = |name: &str| dir.path().join(name);
        std::fs::write(p("ca.pem"), &ca.cert_pem).unwrap();
        std::fs::write(p("server.pem"), server_cert).unwrap();
        std::fs::write(p("server.key"), server_key).unwrap();
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(p(sub)).unwrap();
        }
        std::fs::write(p("enabled_plugins"), "[rabbitmq_auth_mechanism_ssl].\n").unwrap();
        std::fs::write(p("rabbitmq-env.conf"), "").unwrap();
        std::fs::write(
            p("definitions.json"),
            serde_json::to_vec_pretty(&definitions(users)).unwrap(),
        )
        .unwrap();
        let port = free_port();
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
        std::fs::write(p("rabbitmq.conf"), conf).unwrap();
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
            dist_port: free_port(),
            epmd_port: free_port(),
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
                .unwrap(),
        );
        rabbit.boot().await;
        rabbit
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts the server process (again) and waits for its TLS port.
    pub async fn boot(&mut self) {
        assert!(self.server.is_none(), "already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("server.out"))
            .unwrap();
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
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap();
        self.server = Some(child);
        let started = Instant::now();
        loop {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                eprintln!("RabbitMQ up after {:?}", started.elapsed());
                return;
            }
            if let Some(child) = self.server.as_mut()
                && let Ok(Some(exit)) = child.try_wait()
            {
                panic!(
                    "rabbitmq-server exited ({exit}) while booting:\n{}",
                    self.log_tail()
                );
            }
            assert!(
                started.elapsed() < BOOT_TIMEOUT,
                "RabbitMQ not listening within {BOOT_TIMEOUT:?}:\n{}",
                self.log_tail()
            );
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
        let mut text = String::new();
        let log = self.path("log").join(format!("{}.log", self.node_name));
        for f in [self.path("server.out"), log] {
            let s = std::fs::read_to_string(&f).unwrap_or_default();
            let lines: Vec<&str> = s.lines().collect();
            let from = lines.len().saturating_sub(30);
            text.push_str(&format!(
                "--- {}\n{}\n",
                f.display(),
                lines[from..].join("\n")
            ));
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
