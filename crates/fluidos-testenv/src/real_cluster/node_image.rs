//! The fluidos-node image as `deploy/Containerfile` describes it: its layout
//! read from the file itself (so this follows it), the static binary
//! checked, and the image built from them for a real node's containerd.

use std::path::{Path, PathBuf};

use crate::{Error, ImageSpec};

/// The image's repository in the real clusters (never pulled).
pub const REAL_IMAGE_REPOSITORY: &str = "fluidos.test/fluidos-node";
/// The image's tag in the real clusters.
pub const REAL_IMAGE_TAG: &str = "ci";

/// What `deploy/Containerfile` puts in the image.
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

fn layout_error(what: &str) -> Error {
    Error::Image(format!("deploy/Containerfile has no {what}"))
}

/// Reads the layout out of the Containerfile's text.
pub fn image_layout(containerfile: &str) -> Result<ImageLayout, Error> {
    let lines: Vec<&str> = containerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let copy: Vec<&str> = lines
        .iter()
        .find(|l| l.starts_with("COPY target/"))
        .ok_or_else(|| layout_error("`COPY target/... /out/...` line"))?
        .split_whitespace()
        .collect();
    let (Some(source), Some(to)) = (copy.get(1), copy.get(2)) else {
        return Err(layout_error("`COPY <source> <destination>` line"));
    };
    let binary = to
        .strip_prefix("/out")
        .ok_or_else(|| layout_error("COPY into /out (the links stage)"))?
        .to_owned();
    let links = lines
        .iter()
        .find_map(|l| l.strip_prefix("for name in "))
        .and_then(|rest| rest.split(';').next())
        .ok_or_else(|| layout_error("`for name in ...;` line"))?
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let user = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .ok_or_else(|| layout_error("USER line"))?
        .trim()
        .to_owned();
    let entrypoint = lines
        .iter()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .and_then(|json| serde_json::from_str::<Vec<String>>(json).ok())
        .and_then(|argv| argv.into_iter().next())
        .ok_or_else(|| layout_error("ENTRYPOINT in exec form"))?;
    Ok(ImageLayout {
        source: (*source).to_owned(),
        binary,
        links,
        user,
        entrypoint,
    })
}

/// Whether a 64-bit little-endian ELF file asks for a program interpreter
/// (a dynamic loader), which an image without libc does not have.
pub fn has_interpreter(elf: &[u8]) -> Result<bool, Error> {
    const PT_INTERP: u32 = 3;
    let not_elf = || Error::Image("not a 64-bit ELF file".into());
    if elf.get(..4) != Some(b"\x7fELF") || elf.get(4) != Some(&2) {
        return Err(not_elf());
    }
    let bytes = |o: usize, n: usize| elf.get(o..o + n).ok_or_else(not_elf);
    let u16_at = |o| bytes(o, 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o| bytes(o, 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at = |o| {
        bytes(o, 8).map(|b| {
            let mut a = [0; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    };
    let phoff = usize::try_from(u64_at(0x20)?).map_err(|_| not_elf())?;
    let (phentsize, phnum) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    for i in 0..phnum {
        if u32_at(phoff + i * phentsize)? == PT_INTERP {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The static binary, checked, with the Containerfile's layout.
#[derive(Debug)]
pub struct NodeImage {
    bin: PathBuf,
    size: usize,
    layout: ImageLayout,
}

impl NodeImage {
    /// Reads `bin` (refused if it asks for a dynamic loader) and
    /// `deploy/Containerfile`.
    pub fn load(bin: &Path) -> Result<NodeImage, Error> {
        let elf =
            std::fs::read(bin).map_err(|e| Error::io(format!("reading {}", bin.display()), e))?;
        if has_interpreter(&elf)? {
            return Err(Error::Image(format!(
                "{} asks for a dynamic loader: not a static binary (tools/image/build-static.sh builds one)",
                bin.display()
            )));
        }
        let path = crate::workspace_root().join("deploy/Containerfile");
        let containerfile = std::fs::read_to_string(&path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        Ok(NodeImage {
            bin: bin.to_path_buf(),
            size: elf.len(),
            layout: image_layout(&containerfile)?,
        })
    }

    /// The binary's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The Containerfile's layout.
    pub fn layout(&self) -> &ImageLayout {
        &self.layout
    }

    /// Whether the binary is the one the Containerfile copies (not the
    /// glibc fallback `tools/image/build-static.sh` makes without musl).
    pub fn is_the_containerfiles(&self) -> bool {
        self.bin.ends_with(&self.layout.source)
    }

    /// The image the Containerfile describes, built here: the binary and
    /// its links where the Containerfile puts them, the `nonroot` user
    /// distroless/static has, and the CA bundle it ships.
    pub fn spec(&self) -> Result<ImageSpec, Error> {
        let layout = &self.layout;
        let binary = layout.binary.trim_start_matches('/');
        let (dir, name) = binary
            .rsplit_once('/')
            .ok_or_else(|| layout_error("binary in a directory"))?;
        let mut image = ImageSpec::new(format!("{REAL_IMAGE_REPOSITORY}:{REAL_IMAGE_TAG}"))
            .executable(binary, &self.bin)
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
        Ok(image)
    }
}
