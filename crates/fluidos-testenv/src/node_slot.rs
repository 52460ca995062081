//! The machine-wide place of one real node: a network namespace of its own,
//! the addresses in it, a scratch directory, and the clean-up of all of it,
//! including what a killed test run left behind.
//!
//! Slot `N` is held by an exclusive lock on `/run/fluidos-testenv/slot-N.lock`
//! for as long as the node lives, so concurrent tests (and test binaries) never
//! share one. Its names and addresses follow from `N` alone, which is what lets
//! the next holder remove a crashed run's leftovers before it starts (and any
//! acquire sweeps the other free slots, so leftovers in a slot no later run
//! reaches go too):
//!
//! | what | value |
//! |---|---|
//! | network namespace | `fluidos-testenv-N` |
//! | host end of the veth pair | `fltenv-N`, address `10.250.N.1/30` |
//! | node end (`eth0` in the namespace) | `10.250.N.2/30`, the Node's InternalIP |
//! | pod network (CNI bridge `cni0` in the namespace) | `10.244.N.0/24` |
//! | scratch directory | `/var/tmp/fluidos-testenv/node-N` |
//!
//! The kube-apiserver of the node's cluster listens on the host end, so the
//! kubelet, and pods through the namespace's default route, reach it. The
//! host forwards between slots (IPv4 forwarding is turned on), so pods of
//! one cluster reach another cluster's node address, as across a network.

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;

const LOCK_DIR: &str = "/run/fluidos-testenv";
const SCRATCH_ROOT: &str = "/var/tmp/fluidos-testenv";
/// Slots on one machine; each test holding a real node takes one.
const SLOTS: u8 = 32;
/// How long clean-up waits for killed processes to be gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// One slot, locked; dropping it removes the namespace, mounts and directory.
#[derive(Debug)]
pub(crate) struct NodeSlot {
    index: u8,
    _lock: File,
    dir: PathBuf,
}

impl NodeSlot {
    /// Takes the first free slot, removes whatever an earlier holder left, and
    /// creates its network namespace, veth pair and routes. The other free
    /// slots that hold a killed run's leftovers are cleaned on the way (a
    /// test that no later test's slot number reaches would otherwise keep its
    /// namespace, veth and mounts until the machine restarts).
    pub(crate) fn acquire() -> Result<NodeSlot, Error> {
        std::fs::create_dir_all(LOCK_DIR)
            .map_err(|e| Error::io(format!("creating {LOCK_DIR}"), e))?;
        let mut taken = None;
        for index in 0..SLOTS {
            let path = Path::new(LOCK_DIR).join(format!("slot-{index}.lock"));
            let lock = File::create(&path)
                .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
            if lock.try_lock().is_err() {
                continue;
            }
            let slot = NodeSlot {
                index,
                _lock: lock,
                dir: Path::new(SCRATCH_ROOT).join(format!("node-{index}")),
            };
            if taken.is_none() {
                slot.clean_up()?;
                slot.create()?;
                taken = Some(slot);
            }
            // Any other free slot: dropping it cleans up what a killed run
            // left (nothing, usually: the clean-up is idempotent) and unlocks.
        }
        taken.ok_or_else(|| {
            Error::RealNode(format!(
                "all {SLOTS} real-node slots under {LOCK_DIR} are held by other tests"
            ))
        })
    }

    /// The network namespace's name (under `/run/netns`).
    pub(crate) fn netns(&self) -> String {
        format!("fluidos-testenv-{}", self.index)
    }

    /// The path `nsenter --net=` takes.
    pub(crate) fn netns_path(&self) -> PathBuf {
        Path::new("/run/netns").join(self.netns())
    }

    fn host_link(&self) -> String {
        format!("fltenv-{}", self.index)
    }

    /// The host end of the veth pair, where the cluster's kube-apiserver listens.
    pub(crate) fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 250, self.index, 1)
    }

    /// The node's address inside its namespace (its InternalIP).
    pub(crate) fn node_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 250, self.index, 2)
    }

    /// The pod network of this node.
    pub(crate) fn pod_cidr(&self) -> String {
        format!("10.244.{}.0/24", self.index)
    }

    /// This slot's scratch directory (containerd's root and state, the kubelet's
    /// root, logs); wiped when the slot is taken and when it is dropped.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn create(&self) -> Result<(), Error> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io(format!("creating {}", self.dir.display()), e))?;
        let ns = self.netns();
        let host = self.host_link();
        let host_cidr = format!("{}/30", self.host_ip());
        let node_cidr = format!("{}/30", self.node_ip());
        let host_ip = self.host_ip().to_string();
        let node_ip = self.node_ip().to_string();
        let pod_cidr = self.pod_cidr();
        let in_ns = |args: &[&str]| {
            let mut all = vec!["-n", ns.as_str()];
            all.extend_from_slice(args);
            ip(&all)
        };
        ip(&["netns", "add", &ns])?;
        ip(&[
            "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ])?;
        ip(&["addr", "add", &host_cidr, "dev", &host])?;
        ip(&["link", "set", &host, "up"])?;
        in_ns(&["addr", "add", &node_cidr, "dev", "eth0"])?;
        in_ns(&["link", "set", "eth0", "up"])?;
        in_ns(&["link", "set", "lo", "up"])?;
        in_ns(&["route", "add", "default", "via", &host_ip])?;
        // The namespace routes between its pods' bridge and eth0.
        ip(&[
            "netns",
            "exec",
            &ns,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ])?;
        // The host reaches pods directly (tests connect to pod addresses).
        ip(&["route", "add", &pod_cidr, "via", &node_ip])?;
        // And routes between slots: one cluster's pods reach another's node
        // (a NodePort, a REAR gateway) as across a real network.
        enable_host_forwarding()?;
        Ok(())
    }

    /// Kills what runs in the namespace and in this node's containers, unmounts
    /// everything under the scratch directory, removes the containers'
    /// cgroups, the namespace and the directory. Idempotent.
    pub(crate) fn clean_up(&self) -> Result<(), Error> {
        let containers = self.container_ids();
        let deadline = Instant::now() + KILL_WAIT;
        loop {
            let mut pids = self.netns_pids();
            for id in &containers {
                pids.extend(cgroup_pids(id));
            }
            if pids.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(Error::RealNode(format!(
                    "processes {pids:?} of slot {} survived SIGKILL for {KILL_WAIT:?}",
                    self.index
                )));
            }
            for pid in pids {
                kill(pid);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        unmount_under(&self.dir)?;
        for id in &containers {
            remove_cgroups(id);
        }
        if self.netns_path().exists() {
            ip(&["netns", "del", &self.netns()])?;
        }
        // Deleting the namespace deletes the veth's other end, and the host
        // end goes with it a moment later: one gone by then is not an error
        // (ip may say so while its /sys entry is still there).
        let host_link = Path::new("/sys/class/net").join(self.host_link());
        if host_link.exists()
            && let Err(e) = ip(&["link", "del", &self.host_link()])
            && host_link.exists()
            && !e.to_string().contains("Cannot find device")
        {
            return Err(e);
        }
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io(format!("removing {}", self.dir.display()), e))
            }
            _ => Ok(()),
        }
    }

    /// Containers this node's containerd runs (or ran before being killed):
    /// one directory each under its runc shim state.
    fn container_ids(&self) -> Vec<String> {
        let tasks = self
            .dir
            .join("containerd/state/io.containerd.runtime.v2.task/k8s.io");
        std::fs::read_dir(tasks)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().into_string().ok())
            .collect()
    }

    /// Processes in this slot's network namespace: containerd, its shims, the
    /// kubelet and kube-proxy (pods have namespaces of their own).
    fn netns_pids(&self) -> Vec<i32> {
        if !self.netns_path().exists() {
            return Vec::new();
        }
        Command::new("ip")
            .args(["netns", "pids", &self.netns()])
            .output()
            .map(|out| {
                String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .filter_map(|pid| pid.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for NodeSlot {
    fn drop(&mut self) {
        if let Err(e) = self.clean_up() {
            let line = format!("fluidos-testenv: cleaning up real-node slot: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
    }
}

/// Turns on IPv4 forwarding in the host's namespace (idempotent; left on, as
/// a container host has it).
fn enable_host_forwarding() -> Result<(), Error> {
    const KEY: &str = "/proc/sys/net/ipv4/ip_forward";
    if std::fs::read_to_string(KEY).is_ok_and(|v| v.trim() == "1") {
        return Ok(());
    }
    std::fs::write(KEY, "1").map_err(|e| Error::io(format!("writing {KEY}"), e))
}

/// Runs `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> Result<(), Error> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Error::io("running ip (iproute2)", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::RealNode(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The cgroup v1 hierarchies (or the v2 root) containerd puts containers in.
fn cgroup_roots() -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    std::fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| !path.is_symlink() && path.join("cgroup.procs").exists())
        .collect()
}

/// The directories of container `id` in each hierarchy (containerd's CRI
/// places each container at `/k8s.io/<id>` with the cgroupfs driver).
fn container_cgroups(id: &str) -> Vec<PathBuf> {
    cgroup_roots()
        .into_iter()
        .map(|root| root.join("k8s.io").join(id))
        .filter(|dir| dir.is_dir())
        .collect()
}

fn cgroup_pids(id: &str) -> Vec<i32> {
    container_cgroups(id)
        .into_iter()
        .filter_map(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
        .flat_map(|procs| {
            procs
                .split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

fn remove_cgroups(id: &str) {
    for dir in container_cgroups(id) {
        // An emptied cgroup goes with rmdir; one still busy is the kernel's.
        let _ = std::fs::remove_dir(dir);
    }
}

#[allow(unsafe_code)]
fn kill(pid: i32) {
    // SAFETY: kill(2) with a pid read from the kernel; a stale pid fails with
    // ESRCH, which is ignored.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
}

/// Unmounts every mount point under `dir`, deepest first: the containers'
/// root file systems, pod volumes, and the pods' network namespace files
/// (containerd keeps them under its state directory here).
fn unmount_under(dir: &Path) -> Result<(), Error> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Error::io("reading /proc/self/mountinfo", e))?;
    let mut points = mount_points_under(&mountinfo, dir);
    points.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    for point in points {
        umount_detach(&point)?;
    }
    Ok(())
}

/// Mount points (field 5 of mountinfo, octal escapes undone) under `dir`.
fn mount_points_under(mountinfo: &str, dir: &Path) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_mount_path)
        .map(PathBuf::from)
        .filter(|point| point.starts_with(dir))
        .collect()
}

fn unescape_mount_path(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 4);
        match code.and_then(|c| u8::from_str_radix(c, 8).ok()) {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[allow(unsafe_code)]
fn umount_detach(point: &Path) -> Result<(), Error> {
    use std::os::unix::ffi::OsStrExt as _;
    let mut bytes = point.as_os_str().as_bytes().to_vec();
    bytes.push(0);
    // SAFETY: `bytes` is a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::umount2(bytes.as_ptr().cast(), libc::MNT_DETACH) };
    if rc == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    // Gone already (a parent's detach took it along): nothing to do.
    if matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOENT)) {
        return Ok(());
    }
    Err(Error::io(format!("unmounting {}", point.display()), err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_under_the_dir_are_found_and_unescaped() {
        let mountinfo = "\
22 1 0:21 / /sys rw - sysfs sysfs rw
900 22 0:50 / /var/tmp/fluidos-testenv/node-3/containerd/state/x/rootfs rw - overlay overlay rw
901 22 0:51 / /var/tmp/fluidos-testenv/node-3/kubelet/pods/a\\040b/volumes rw - tmpfs tmpfs rw
902 22 0:52 / /var/tmp/fluidos-testenv/node-30/other rw - tmpfs tmpfs rw
";
        let points = mount_points_under(mountinfo, Path::new("/var/tmp/fluidos-testenv/node-3"));
        assert_eq!(
            points,
            [
                PathBuf::from("/var/tmp/fluidos-testenv/node-3/containerd/state/x/rootfs"),
                PathBuf::from("/var/tmp/fluidos-testenv/node-3/kubelet/pods/a b/volumes"),
            ]
        );
    }

    #[test]
    fn slot_names_and_addresses_follow_from_the_index() {
        let slot = NodeSlot {
            index: 7,
            _lock: File::open("/dev/null").unwrap(),
            dir: PathBuf::from("/nonexistent/fluidos-testenv-unit"),
        };
        assert_eq!(slot.netns(), "fluidos-testenv-7");
        assert!(
            slot.host_link().len() <= 15,
            "Linux interface names are 15 bytes at most"
        );
        assert_eq!(slot.host_ip(), Ipv4Addr::new(10, 250, 7, 1));
        assert_eq!(slot.node_ip(), Ipv4Addr::new(10, 250, 7, 2));
        assert_eq!(slot.pod_cidr(), "10.244.7.0/24");
        std::mem::forget(slot);
    }
}
