//! The fluidos-node image as `deploy/Containerfile` describes it: its layout
//! read from the file, the static binary checked, and the image built from
//! them for a real node's containerd.

use std::path::{Path, PathBuf};

/// What `deploy/Containerfile` puts in the image, read from the file itself
/// so that this test follows it.
#[derive(Debug, PartialEq, Eq)]
pub struct ImageLayout {
    /// Where the build context holds the binary
    /// (`tools/image/build-static.sh` puts it there).
    pub source: String,
    /// Where the binary lands, e.g. `/usr/bin/fluidos-node`.
    pub binary: String,
    /// The names linked to it in the same directory (the Go binaries').
    pub links: Vec<String>,
    /// `USER`, as `uid:gid`.
    pub user: String,
    /// `ENTRYPOINT`'s program.
    pub entrypoint: String,
}

/// Reads the layout out of the Containerfile's text.
pub fn image_layout(containerfile: &str) -> ImageLayout {
    let lines: Vec<&str> = containerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let copy: Vec<&str> = lines
        .iter()
        .find(|l| l.starts_with("COPY target/"))
        .expect("a `COPY target/... /out/...` line")
        .split_whitespace()
        .collect();
    let source = copy[1].to_owned();
    let binary = copy[2]
        .strip_prefix("/out")
        .expect("the links stage copies into /out")
        .to_owned();
    let links = lines
        .iter()
        .find_map(|l| l.strip_prefix("for name in "))
        .and_then(|rest| rest.split(';').next())
        .expect("a `for name in ...;` line")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let user = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line")
        .trim()
        .to_owned();
    let entrypoint = lines
        .iter()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .and_then(|json| serde_json::from_str::<Vec<String>>(json).ok())
        .and_then(|argv| argv.into_iter().next())
        .expect("an ENTRYPOINT in exec form");
    ImageLayout {
        source,
        binary,
        links,
        user,
        entrypoint,
    }
}

/// Whether an ELF file asks for a program interpreter (a dynamic loader),
/// which an image without libc does not have.
pub fn has_interpreter(elf: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not a 64-bit ELF file");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let phoff = usize::try_from(u64_at(0x20)).unwrap();
    let (phentsize, phnum) = (usize::from(u16_at(0x36)), usize::from(u16_at(0x38)));
    (0..phnum).any(|i| u32_at(phoff + i * phentsize) == PT_INTERP)
}

/// The static binary to check, or why this run cannot.
pub fn static_binary() -> Result<PathBuf, String> {
    // CI runs this file a second time once the binary is built, and checks
    // that it did not skip then.
    let Some(bin) = std::env::var_os("FLUIDOS_STATIC_BINARY") else {
        return Err(
            "FLUIDOS_STATIC_BINARY is unset (tools/image/build-static.sh prints the path)".into(),
        );
    };
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let root = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0");
    if !root {
        return Err("chroot needs root".into());
    }
    // Relative to the workspace, where CI and the docs run it from (a test
    // runs in its package's directory).
    Ok(Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(bin))
}

/// The binary, checked static, and the Containerfile's layout.
pub fn read_image(bin: &Path) -> (Vec<u8>, ImageLayout) {
    let elf = std::fs::read(bin).unwrap();
    assert!(
        !has_interpreter(&elf),
        "{} asks for a dynamic loader: not a static binary",
        bin.display()
    );
    println!(
        "static binary: {} bytes ({} MiB)",
        elf.len(),
        elf.len() >> 20
    );
    let containerfile = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/Containerfile"),
    )
    .unwrap();
    let layout = image_layout(&containerfile);
    // The glibc fallback (no musl build on this machine) lands elsewhere:
    // noted by hand, refused in CI, which must check the image's binary.
    if !bin.ends_with(&layout.source) {
        assert!(
            std::env::var_os("CI").is_none(),
            "{} is not the Containerfile's {}",
            bin.display(),
            layout.source
        );
        println!(
            "NOTE: {} is not the Containerfile's {}",
            bin.display(),
            layout.source
        );
    }

    (elf, layout)
}

/// The image `deploy/Containerfile` describes, built here from the static
/// binary: the binary and its links where the Containerfile puts them, the
/// `nonroot` user distroless/static has, and the CA bundle it ships.
pub fn node_image(bin: &Path, layout: &ImageLayout) -> fluidos_testenv::ImageSpec {
    let binary = layout.binary.trim_start_matches('/');
    let (dir, name) = binary.rsplit_once('/').unwrap();
    let mut image = fluidos_testenv::ImageSpec::new(format!("{REAL_IMAGE_REPOSITORY}:{REAL_IMAGE_TAG}"))
        .executable(binary, bin)
        .file(
            "etc/passwd",
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        )
        .file("etc/group", "root:x:0:\nnonroot:x:65532:\n")
        .file(
            "etc/ssl/certs/ca-certificates.crt",
            std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default(),
        )
        .entrypoint(&[layout.entrypoint.as_str()])
        .user(&layout.user);
    for link in &layout.links {
        image = image.symlink(&format!("{dir}/{link}"), name);
    }
    image
}

pub const REAL_IMAGE_REPOSITORY: &str = "fluidos.test/fluidos-node";
pub const REAL_IMAGE_TAG: &str = "ci";
