//! Child processes that cannot outlive the test binary.
//!
//! Each child gets `PR_SET_PDEATHSIG(SIGKILL)`. The kernel sends that signal
//! when the *thread* that forked the child exits, not the process; cargo test
//! runs every test on its own thread and tokio may retire worker threads, so
//! all children are forked from one process-wide thread that lives until the
//! process does. Drop kills them too, for the ordinary end of a test.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::Error;

/// How many log lines an error quotes.
const TAIL_LINES: usize = 40;

struct SpawnRequest {
    command: Command,
    reply: mpsc::SyncSender<std::io::Result<Child>>,
}

fn spawner() -> Result<&'static mpsc::Sender<SpawnRequest>, Error> {
    static SPAWNER: OnceLock<Result<mpsc::Sender<SpawnRequest>, String>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<SpawnRequest>();
            std::thread::Builder::new()
                .name("fluidos-testenv-spawner".into())
                .spawn(move || {
                    for request in rx {
                        let result = spawn_with_parent_death_signal(request.command);
                        // The requester may have given up (its test panicked); the
                        // child is then dropped here and killed by PDEATHSIG at exit.
                        let _ = request.reply.send(result);
                    }
                })
                .map(|_| tx)
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Spawner(e.clone()))
}

#[allow(unsafe_code)]
fn spawn_with_parent_death_signal(mut command: Command) -> std::io::Result<Child> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt as _;
        // getppid() returns a pid_t; std::process::id() is the same value as u32.
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the closure runs between fork and exec and only makes
        // async-signal-safe system calls (prctl, getppid), without allocating.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl; then no
                // signal would ever come.
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    command.spawn()
}

/// A running control-plane process whose output goes to a log file.
pub(crate) struct ManagedProcess {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl ManagedProcess {
    /// Starts `program args` with stdout and stderr appended to `log`.
    pub(crate) fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        envs: &[(&str, &Path)],
        log: PathBuf,
    ) -> Result<ManagedProcess, Error> {
        let out = File::create(&log)
            .map_err(|e| Error::io(format!("creating log file {}", log.display()), e))?;
        let err = out
            .try_clone()
            .map_err(|e| Error::io(format!("duplicating log file {}", log.display()), e))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (key, value) in envs {
            command.env(key, value);
        }

        let (reply_tx, reply_rx) = mpsc::sync_channel(1);
        spawner()?
            .send(SpawnRequest {
                command,
                reply: reply_tx,
            })
            .map_err(|_| Error::Spawner("spawner thread has exited".into()))?;
        // fork+exec takes milliseconds, so blocking an async caller is harmless.
        let child = reply_rx
            .recv()
            .map_err(|_| Error::Spawner("spawner thread dropped the request".into()))?
            .map_err(|e| Error::io(format!("starting {}", program.display()), e))?;
        Ok(ManagedProcess {
            name: name.to_owned(),
            child: Some(child),
            log,
        })
    }

    /// The process name used in errors.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The last lines of this process's log.
    pub(crate) fn log_tail(&self) -> String {
        format!(
            "--- {} ({}) ---\n{}",
            self.name,
            self.log.display(),
            log_tail(&self.log, TAIL_LINES)
        )
    }

    /// The last `lines` klog error and warning lines of this process's log
    /// (`E1202 ...`, `W1202 ...`), which say why a controller is stuck
    /// better than its last lines do.
    pub(crate) fn problem_lines(&self, lines: usize) -> String {
        format!(
            "--- {} problems ---\n{}",
            self.name,
            problem_lines_in(&self.log, lines)
        )
    }

    /// `Err(ProcessExited)` with the log tail if the process is gone.
    pub(crate) fn ensure_running(&mut self) -> Result<(), Error> {
        let status = match self.child.as_mut() {
            None => Some("already stopped".to_owned()),
            Some(child) => match child.try_wait() {
                Ok(None) => None,
                Ok(Some(status)) => Some(status.to_string()),
                Err(e) => Some(format!("unknown ({e})")),
            },
        };
        match status {
            None => Ok(()),
            Some(status) => Err(Error::ProcessExited {
                name: self.name.clone(),
                status,
                log: self.log.clone(),
                log_tail: log_tail(&self.log, TAIL_LINES),
            }),
        }
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub(crate) async fn terminate(&mut self, grace: Duration) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if matches!(child.try_wait(), Ok(None)) {
            send_sigterm(child.id());
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if !matches!(child.try_wait(), Ok(None)) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.kill();
    }

    /// SIGKILL and reap; idempotent.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Errors mean it already exited; reaping is all that is left.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ManagedProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[allow(unsafe_code)]
fn send_sigterm(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own
    // unreaped child, so it cannot have been recycled for another process.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}

/// The last `lines` lines of a log file; only its end is read because
/// kube-apiserver logs can be large.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    last_lines(&log_end(path, 32 * 1024), lines)
}

/// The last `max_bytes` of a log file, or a line saying why it is unreadable.
fn log_end(path: &Path, max_bytes: u64) -> String {
    let read = || -> std::io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(max_bytes)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    read().unwrap_or_else(|e| format!("(log {} unreadable: {e})", path.display()))
}

/// The last `lines` klog error and warning lines in the end of a log file.
pub(crate) fn problem_lines_in(path: &Path, lines: usize) -> String {
    problem_lines(&log_end(path, 512 * 1024), lines)
}

/// The last `lines` klog lines of severity error or warning: a line that
/// starts with `E` or `W` and then the four digits of `MMDD`.
fn problem_lines(text: &str, lines: usize) -> String {
    let is_problem = |l: &&str| {
        let b = l.as_bytes();
        b.len() > 5 && matches!(b[0], b'E' | b'W') && b[1..5].iter().all(u8::is_ascii_digit)
    };
    let found: Vec<&str> = text.lines().filter(is_problem).collect();
    if found.is_empty() {
        return "(none)".to_owned();
    }
    found[found.len().saturating_sub(lines)..].join("\n")
}

fn last_lines(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_keeps_the_end() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(last_lines("a\nb", 5), "a\nb");
        assert_eq!(last_lines("", 3), "");
    }

    #[test]
    fn problem_lines_are_klog_errors_and_warnings() {
        let log = "I1202 01:11:16 started\nE1202 01:11:17 tenant.go:1] signature verification failed\n\
                   Error: not klog\nW1202 01:11:18 csr.go:2] slow\nE12\n";
        assert_eq!(
            problem_lines(log, 5),
            "E1202 01:11:17 tenant.go:1] signature verification failed\nW1202 01:11:18 csr.go:2] slow"
        );
        assert_eq!(problem_lines(log, 1), "W1202 01:11:18 csr.go:2] slow");
        assert_eq!(problem_lines("I1202 fine", 3), "(none)");
    }

    #[test]
    fn log_tail_of_missing_file_says_so() {
        assert!(log_tail(Path::new("/nonexistent/x.log"), 3).contains("unreadable"));
    }

    #[tokio::test]
    async fn spawned_process_is_logged_detected_and_killed() {
        let dir = tempfile::tempdir().unwrap();
        let args = vec!["-c".to_owned(), "echo hello-from-child; exit 3".to_owned()];
        let mut p = ManagedProcess::spawn(
            "sh",
            Path::new("/bin/sh"),
            &args,
            &[],
            dir.path().join("sh.log"),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let err = loop {
            match p.ensure_running() {
                Err(e) => break e,
                Ok(()) if Instant::now() > deadline => panic!("sh did not exit"),
                Ok(()) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let text = err.to_string();
        assert!(text.contains("hello-from-child"), "{text}");
        assert!(text.contains("exit status: 3"), "{text}");

        let args = vec!["-c".to_owned(), "sleep 600".to_owned()];
        let mut p = ManagedProcess::spawn(
            "sleeper",
            Path::new("/bin/sh"),
            &args,
            &[],
            dir.path().join("sleep.log"),
        )
        .unwrap();
        p.ensure_running().unwrap();
        p.terminate(Duration::from_secs(5)).await;
        assert!(p.ensure_running().is_err());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn children_survive_the_thread_that_requested_them() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("a.log");
        let handle = std::thread::spawn(move || {
            ManagedProcess::spawn(
                "sleeper",
                Path::new("/bin/sh"),
                &["-c".to_owned(), "sleep 600".to_owned()],
                &[],
                log,
            )
            .unwrap()
        });
        let mut p = handle.join().unwrap();
        // The requesting thread is gone; PDEATHSIG is tied to the spawner
        // thread, so the child must still be alive.
        std::thread::sleep(Duration::from_millis(200));
        p.ensure_running().unwrap();
        p.kill();
    }
}
