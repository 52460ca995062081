//! OCI image archives built from files on this machine, for a real node's
//! containerd to import: there is no registry to pull from here.
//!
//! An archive is an OCI image layout (`oci-layout`, `index.json`, blobs under
//! `blobs/sha256/`) in one uncompressed tar, with a single layer. The index
//! names the image with containerd's `io.containerd.image.name` annotation, so
//! `ctr images import` stores it under that reference.

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use oci_spec::image::{
    ANNOTATION_REF_NAME, ConfigBuilder, Descriptor, Digest, ImageConfigurationBuilder,
    ImageIndexBuilder, ImageManifestBuilder, MediaType, OciLayoutBuilder, RootFsBuilder,
};
use sha2::Digest as _;

use crate::Error;

/// The annotation `ctr images import` reads an OCI archive's image name from.
const CONTAINERD_IMAGE_NAME: &str = "io.containerd.image.name";

/// One file of an image: where it lies in the image and where its bytes come from.
#[derive(Debug, Clone)]
struct ImageFile {
    path_in_image: String,
    source: FileSource,
    mode: u32,
}

#[derive(Debug, Clone)]
enum FileSource {
    Host(PathBuf),
    Bytes(Vec<u8>),
    Symlink(String),
    Directory,
}

/// An image to build: a name, its files (one layer) and how it starts.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    name: String,
    files: Vec<ImageFile>,
    entrypoint: Vec<String>,
    user: Option<String>,
}

impl ImageSpec {
    /// An empty image named `name` (a full reference, e.g. `fluidos.test/pause:1`).
    pub fn new(name: impl Into<String>) -> ImageSpec {
        ImageSpec {
            name: name.into(),
            files: Vec::new(),
            entrypoint: Vec::new(),
            user: None,
        }
    }

    /// The image's reference.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Copies the host file `source` to `path_in_image` (relative, e.g. `bin/sh`), executable.
    #[must_use]
    pub fn executable(mut self, path_in_image: &str, source: impl Into<PathBuf>) -> ImageSpec {
        self.files.push(ImageFile {
            path_in_image: path_in_image.trim_start_matches('/').to_owned(),
            source: FileSource::Host(source.into()),
            mode: 0o755,
        });
        self
    }

    /// Writes `contents` to `path_in_image`, readable by all.
    #[must_use]
    pub fn file(mut self, path_in_image: &str, contents: impl Into<Vec<u8>>) -> ImageSpec {
        self.files.push(ImageFile {
            path_in_image: path_in_image.trim_start_matches('/').to_owned(),
            source: FileSource::Bytes(contents.into()),
            mode: 0o644,
        });
        self
    }

    /// A symbolic link at `path_in_image` pointing at `target` (as written,
    /// e.g. `fluidos-node` for a link beside its target).
    #[must_use]
    pub fn symlink(mut self, path_in_image: &str, target: &str) -> ImageSpec {
        self.files.push(ImageFile {
            path_in_image: path_in_image.trim_start_matches('/').to_owned(),
            source: FileSource::Symlink(target.to_owned()),
            mode: 0o777,
        });
        self
    }

    /// An empty directory at `path_in_image` with `mode` (e.g. `0o1777` for
    /// a `/tmp` any user may write, as base images have).
    #[must_use]
    pub fn directory(mut self, path_in_image: &str, mode: u32) -> ImageSpec {
        self.files.push(ImageFile {
            path_in_image: path_in_image.trim_matches('/').to_owned(),
            source: FileSource::Directory,
            mode,
        });
        self
    }

    /// The command the image starts by default.
    #[must_use]
    pub fn entrypoint(mut self, argv: &[&str]) -> ImageSpec {
        self.entrypoint = argv.iter().map(|a| (*a).to_owned()).collect();
        self
    }

    /// The user the image runs as (`uid` or `uid:gid`), as `runAsNonRoot` needs a numeric one.
    #[must_use]
    pub fn user(mut self, user: &str) -> ImageSpec {
        self.user = Some(user.to_owned());
        self
    }

    /// Writes the image as an OCI layout tar to `out`.
    pub fn write_archive(&self, out: &Path) -> Result<(), Error> {
        let layer = self.layer_tar()?;
        let layer_digest = sha256(&layer);

        let mut config = ConfigBuilder::default();
        config = config.env(vec!["PATH=/bin".to_owned()]);
        if !self.entrypoint.is_empty() {
            config = config.entrypoint(self.entrypoint.clone());
        }
        if let Some(user) = &self.user {
            config = config.user(user.clone());
        }
        let configuration = ImageConfigurationBuilder::default()
            .architecture(oci_spec::image::Arch::Amd64)
            .os(oci_spec::image::Os::Linux)
            .config(config.build().map_err(oci)?)
            .rootfs(
                RootFsBuilder::default()
                    .typ("layers")
                    .diff_ids(vec![layer_digest.to_string()])
                    .build()
                    .map_err(oci)?,
            )
            .build()
            .map_err(oci)?;
        let config_json = configuration.to_string().map_err(oci)?.into_bytes();
        let config_digest = sha256(&config_json);

        let manifest = ImageManifestBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageManifest)
            .config(Descriptor::new(
                MediaType::ImageConfig,
                len(&config_json),
                config_digest.clone(),
            ))
            .layers(vec![Descriptor::new(
                MediaType::ImageLayer,
                len(&layer),
                layer_digest.clone(),
            )])
            .build()
            .map_err(oci)?;
        let manifest_json = manifest.to_string().map_err(oci)?.into_bytes();
        let manifest_digest = sha256(&manifest_json);

        let tag = self.name.rsplit_once(':').map_or("latest", |(_, tag)| tag);
        let mut manifest_descriptor = Descriptor::new(
            MediaType::ImageManifest,
            len(&manifest_json),
            manifest_digest.clone(),
        );
        manifest_descriptor.set_annotations(Some(
            [
                (CONTAINERD_IMAGE_NAME.to_owned(), self.name.clone()),
                (ANNOTATION_REF_NAME.to_owned(), tag.to_owned()),
            ]
            .into(),
        ));
        let index = ImageIndexBuilder::default()
            .schema_version(2u32)
            .media_type(MediaType::ImageIndex)
            .manifests(vec![manifest_descriptor])
            .build()
            .map_err(oci)?;
        let layout = OciLayoutBuilder::default()
            .image_layout_version("1.0.0")
            .build()
            .map_err(oci)?;
        let layout_json = serde_json::to_vec(&layout).map_err(|e| Error::Fixture(e.to_string()))?;

        let file = std::fs::File::create(out)
            .map_err(|e| Error::io(format!("creating {}", out.display()), e))?;
        let mut archive = tar::Builder::new(std::io::BufWriter::new(file));
        let mut add = |name: &str, bytes: &[u8]| append(&mut archive, name, bytes, 0o644);
        add("oci-layout", &layout_json)?;
        add("index.json", index.to_string().map_err(oci)?.as_bytes())?;
        for (digest, bytes) in [
            (&config_digest, &config_json),
            (&layer_digest, &layer),
            (&manifest_digest, &manifest_json),
        ] {
            add(&format!("blobs/sha256/{}", digest.digest()), bytes)?;
        }
        archive
            .into_inner()
            .and_then(|mut w| w.flush())
            .map_err(|e| Error::io(format!("writing {}", out.display()), e))
    }

    /// The single layer: every file, with the directories above it.
    fn layer_tar(&self) -> Result<Vec<u8>, Error> {
        let mut layer = tar::Builder::new(Vec::new());
        let mut dirs = BTreeSet::new();
        for file in &self.files {
            let mut parent = Path::new(&file.path_in_image).parent();
            let mut missing = Vec::new();
            while let Some(dir) = parent.filter(|d| !d.as_os_str().is_empty()) {
                if dirs.insert(dir.to_path_buf()) {
                    missing.push(dir.to_path_buf());
                }
                parent = dir.parent();
            }
            for dir in missing.into_iter().rev() {
                let mut header = tar::Header::new_gnu();
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                layer
                    .append_data(&mut header, &dir, std::io::empty())
                    .map_err(|e| Error::io("writing an image layer", e))?;
            }
            let bytes = match &file.source {
                FileSource::Directory => {
                    let mut header = tar::Header::new_gnu();
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(file.mode);
                    header.set_size(0);
                    layer
                        .append_data(&mut header, &file.path_in_image, std::io::empty())
                        .map_err(|e| Error::io("writing an image layer", e))?;
                    continue;
                }
                FileSource::Symlink(target) => {
                    let mut header = tar::Header::new_gnu();
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_mode(file.mode);
                    header.set_size(0);
                    layer
                        .append_link(&mut header, &file.path_in_image, target)
                        .map_err(|e| Error::io("writing an image layer", e))?;
                    continue;
                }
                FileSource::Bytes(bytes) => bytes.clone(),
                FileSource::Host(path) => std::fs::read(path).map_err(|e| {
                    Error::io(
                        format!("reading {} for image {}", path.display(), self.name),
                        e,
                    )
                })?,
            };
            append(&mut layer, &file.path_in_image, &bytes, file.mode)?;
        }
        layer
            .into_inner()
            .map_err(|e| Error::io("finishing an image layer", e))
    }
}

fn append<W: std::io::Write>(
    archive: &mut tar::Builder<W>,
    name: &str,
    bytes: &[u8],
    mode: u32,
) -> Result<(), Error> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(mode);
    header.set_size(len(bytes));
    archive
        .append_data(&mut header, name, bytes)
        .map_err(|e| Error::io(format!("adding {name} to an image archive"), e))
}

fn sha256(bytes: &[u8]) -> Digest {
    let hex: String = sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    // A sha256 hex string is always a valid digest.
    match format!("sha256:{hex}").parse() {
        Ok(digest) => digest,
        Err(e) => unreachable!("sha256 digest rejected: {e}"),
    }
}

fn len(bytes: &[u8]) -> u64 {
    u64::try_from(bytes.len()).unwrap_or(u64::MAX)
}

fn oci(e: impl std::fmt::Display) -> Error {
    Error::Fixture(format!("building an OCI image: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_is_an_oci_layout_naming_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("image.tar");
        ImageSpec::new("fluidos.test/hello:2")
            .file("www/index.html", "hi\n")
            .symlink("www/home.html", "index.html")
            .directory("tmp", 0o1777)
            .entrypoint(&["/bin/true"])
            .user("1000")
            .write_archive(&out)
            .unwrap();
        let mut archive = tar::Archive::new(std::fs::File::open(&out).unwrap());
        let mut entries = std::collections::BTreeMap::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            entries.insert(name, bytes);
        }
        let index: serde_json::Value = serde_json::from_slice(&entries["index.json"]).unwrap();
        let manifest = &index["manifests"][0];
        assert_eq!(
            manifest["annotations"][CONTAINERD_IMAGE_NAME],
            "fluidos.test/hello:2"
        );
        assert_eq!(manifest["annotations"][ANNOTATION_REF_NAME], "2");
        let digest = manifest["digest"].as_str().unwrap();
        let blob = &entries[&format!("blobs/sha256/{}", &digest["sha256:".len()..])];
        // Every blob is stored under its own digest.
        for (name, bytes) in &entries {
            if let Some(hex) = name.strip_prefix("blobs/sha256/") {
                assert_eq!(sha256(bytes).digest(), hex);
            }
        }
        let manifest: serde_json::Value = serde_json::from_slice(blob).unwrap();
        let config_hex = &manifest["config"]["digest"].as_str().unwrap()["sha256:".len()..];
        let config: serde_json::Value =
            serde_json::from_slice(&entries[&format!("blobs/sha256/{config_hex}")]).unwrap();
        assert_eq!(config["config"]["Entrypoint"][0], "/bin/true");
        assert_eq!(config["config"]["User"], "1000");
        let layer_hex = &manifest["layers"][0]["digest"].as_str().unwrap()["sha256:".len()..];
        let mut layer = tar::Archive::new(&entries[&format!("blobs/sha256/{layer_hex}")][..]);
        let names: Vec<String> = layer
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["www", "www/index.html", "www/home.html", "tmp"]);
        assert!(entries.contains_key("oci-layout"));
    }
}
