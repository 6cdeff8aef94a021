//! OCI image-layout archives built locally, for a containerd that has no registry to pull
//! from: `ctr images import` takes them as they are (see [`crate::containerd`]).
//!
//! An image is one layer holding a statically linked busybox (`/bin/busybox` from Debian's
//! `busybox-static`) with a symlink per applet, a minimal `/etc`, and optionally a
//! `/filler` file of incompressible pseudo-random bytes, so that images meant for image
//! garbage-collection tests have distinct digests and a disk footprint of a chosen size.
//!
//! Everything is deterministic: entries are sorted, owned by root and dated 1970, the gzip
//! header carries no name or time, and the filler comes from a generator seeded by the
//! image's name and the filler's size. Building the same image twice gives the same
//! digests.
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use flate2::Compression;
use serde_json::json;
use sha2::{Digest, Sha256};

/// The busybox binary the images are built from (Debian package `busybox-static`).
pub const BUSYBOX: &str = "/bin/busybox";
/// The sandbox ("pause") image the private containerd is configured with.
pub const PAUSE_IMAGE: &str = "localhost/pause:local";
/// A busybox image whose default command is `/bin/sh`.
pub const BUSYBOX_IMAGE: &str = "localhost/busybox:local";

const MEDIA_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MEDIA_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MEDIA_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const MEDIA_LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// A single-layer busybox image to build as an OCI image-layout tar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciImage {
    name: String,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
    filler: u64,
}

/// The digests (`sha256:<hex>`) and sizes of an archive [`OciImage::write_archive`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuiltImage {
    /// The full image reference, e.g. `localhost/busybox:local`.
    pub name: String,
    /// The manifest's digest: what `ctr images ls` shows in its DIGEST column, and the
    /// `repoDigests` of the CRI.
    pub manifest_digest: String,
    /// The config's digest: the image id the CRI reports.
    pub config_digest: String,
    /// The compressed layer's digest and size.
    pub layer_digest: String,
    pub layer_size: u64,
    /// The uncompressed layer's digest (the config's `diff_id`).
    pub diff_id: String,
    /// The size of the archive file.
    pub archive_size: u64,
}

impl OciImage {
    /// A busybox image named `name` (a full reference with a tag, e.g.
    /// `localhost/busybox:local`): no entrypoint, command `/bin/sh`.
    pub fn busybox(name: &str) -> OciImage {
        OciImage {
            name: name.to_string(),
            entrypoint: Vec::new(),
            cmd: vec!["/bin/sh".into()],
            filler: 0,
        }
    }

    /// The sandbox image [`PAUSE_IMAGE`]: a shell that sleeps until SIGTERM or SIGINT,
    /// then exits 0.
    pub fn pause() -> OciImage {
        OciImage::busybox(PAUSE_IMAGE)
            .with_entrypoint(&[
                "/bin/sh",
                "-c",
                "trap \"exit 0\" TERM INT; while true; do sleep 3600 & wait $!; done",
            ])
            .with_cmd(&[])
    }

    /// Sets the image's entrypoint (config `Entrypoint`).
    pub fn with_entrypoint(mut self, entrypoint: &[&str]) -> OciImage {
        self.entrypoint = entrypoint.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Sets the image's command (config `Cmd`).
    pub fn with_cmd(mut self, cmd: &[&str]) -> OciImage {
        self.cmd = cmd.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Adds a file `/filler` of `bytes` incompressible pseudo-random bytes, seeded by the
    /// image's name and `bytes`: images of different names get different layer digests,
    /// and the image takes about `bytes` more in the content store and again in the
    /// unpacked snapshot.
    pub fn with_filler(mut self, bytes: u64) -> OciImage {
        self.filler = bytes;
        self
    }

    /// The full image reference.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The tag (what follows the last `:` after the last `/`), `latest` when none.
    pub fn tag(&self) -> &str {
        let last = self.name.rsplit('/').next().unwrap_or(&self.name);
        match last.rsplit_once(':') {
            Some((_, tag)) if !tag.is_empty() => tag,
            _ => "latest",
        }
    }

    /// Writes the image as an OCI image-layout tar to `path` (a scratch file
    /// `<path>.layer` is used and removed). Fails when [`BUSYBOX`] is missing.
    pub fn write_archive(&self, path: &Path) -> Result<BuiltImage> {
        ensure!(
            !self.name.is_empty() && !self.name.contains(char::is_whitespace),
            "bad image name {:?}",
            self.name
        );
        let scratch = PathBuf::from(format!("{}.layer", path.display()));
        let result = self.write_archive_with(path, &scratch);
        let _ = std::fs::remove_file(&scratch);
        result.with_context(|| format!("building image {} at {}", self.name, path.display()))
    }

    fn write_archive_with(&self, path: &Path, scratch: &Path) -> Result<BuiltImage> {
        let layer = self.write_layer(scratch)?;
        let config = serde_json::to_vec(&json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Env": ["PATH=/bin"],
                "Entrypoint": self.entrypoint,
                "Cmd": self.cmd,
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
            "history": [{"created_by": "monitor-tests"}],
        }))?;
        let config_digest = sha256_digest(&config);
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MEDIA_MANIFEST,
            "config": {
                "mediaType": MEDIA_CONFIG,
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": MEDIA_LAYER,
                "digest": layer.digest,
                "size": layer.size,
            }],
        }))?;
        let manifest_digest = sha256_digest(&manifest);
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MEDIA_INDEX,
            "manifests": [{
                "mediaType": MEDIA_MANIFEST,
                "digest": manifest_digest,
                "size": manifest.len(),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": self.name,
                    "org.opencontainers.image.ref.name": self.tag(),
                },
            }],
        }))?;
        let oci_layout = br#"{"imageLayoutVersion":"1.0.0"}"#;

        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut archive = tar::Builder::new(BufWriter::new(file));
        archive.mode(tar::HeaderMode::Deterministic);
        append_bytes(&mut archive, "oci-layout", oci_layout)?;
        append_bytes(&mut archive, "index.json", &index)?;
        append_dir(&mut archive, "blobs/")?;
        append_dir(&mut archive, "blobs/sha256/")?;
        append_bytes(&mut archive, &blob_path(&manifest_digest), &manifest)?;
        append_bytes(&mut archive, &blob_path(&config_digest), &config)?;
        let mut layer_file = File::open(scratch)?;
        let mut header = file_header(layer.size, 0o644);
        archive.append_data(&mut header, blob_path(&layer.digest), &mut layer_file)?;
        let mut writer = archive.into_inner()?;
        writer.flush()?;
        let file = writer.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        let archive_size = file.metadata()?.len();
        Ok(BuiltImage {
            name: self.name.clone(),
            manifest_digest,
            config_digest,
            layer_digest: layer.digest,
            layer_size: layer.size,
            diff_id: layer.diff_id,
            archive_size,
        })
    }

    /// Writes the gzipped layer to `scratch`, hashing it compressed and uncompressed.
    fn write_layer(&self, scratch: &Path) -> Result<Layer> {
        let applets = busybox_applets()?;
        let busybox = std::fs::read(BUSYBOX).with_context(|| format!("reading {BUSYBOX}"))?;
        let file =
            File::create(scratch).with_context(|| format!("creating {}", scratch.display()))?;
        let compressed = HashingWriter::new(BufWriter::new(file));
        let gzip = flate2::GzBuilder::new().write(compressed, Compression::fast());
        let uncompressed = HashingWriter::new(gzip);
        let mut tar = tar::Builder::new(uncompressed);
        tar.mode(tar::HeaderMode::Deterministic);

        for dir in [
            "bin/", "dev/", "etc/", "proc/", "root/", "run/", "sys/", "var/",
        ] {
            append_dir(&mut tar, dir)?;
        }
        let mut tmp = dir_header(0o1777);
        tar.append_data(&mut tmp, "tmp/", std::io::empty())?;
        append_bytes(&mut tar, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n")?;
        append_bytes(&mut tar, "etc/group", b"root:x:0:\n")?;
        let mut header = file_header(busybox.len() as u64, 0o755);
        tar.append_data(&mut header, "bin/busybox", busybox.as_slice())?;
        for applet in &applets {
            let mut link = tar::Header::new_ustar();
            link.set_entry_type(tar::EntryType::Symlink);
            link.set_size(0);
            link.set_mode(0o777);
            link.set_mtime(0);
            link.set_uid(0);
            link.set_gid(0);
            tar.append_link(&mut link, format!("bin/{applet}"), "busybox")?;
        }
        if self.filler > 0 {
            let mut header = file_header(self.filler, 0o644);
            let reader = Filler::new(filler_seed(&self.name, self.filler), self.filler);
            tar.append_data(&mut header, "filler", reader)?;
        }

        let uncompressed = tar.into_inner()?;
        let (diff_id, _) = uncompressed.digest();
        let gzip = uncompressed.into_inner();
        let compressed = gzip.finish()?;
        let (digest, size) = compressed.digest();
        let mut writer = compressed.into_inner();
        writer.flush()?;
        writer
            .into_inner()
            .map_err(|e| e.into_error())?
            .sync_all()?;
        Ok(Layer {
            digest,
            size,
            diff_id,
        })
    }
}

struct Layer {
    digest: String,
    size: u64,
    diff_id: String,
}

/// The applet names `busybox --list` prints (without `busybox` itself), sorted.
fn busybox_applets() -> Result<Vec<String>> {
    if !Path::new(BUSYBOX).exists() {
        bail!("{BUSYBOX} is missing: install busybox-static (`cargo xtask setup` does)");
    }
    let out = Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .with_context(|| format!("running {BUSYBOX} --list"))?;
    ensure!(
        out.status.success(),
        "{BUSYBOX} --list failed ({}): is it busybox-static?",
        out.status
    );
    let mut applets: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && *a != "busybox" && !a.contains('/'))
        .map(String::from)
        .collect();
    applets.sort();
    applets.dedup();
    ensure!(
        applets.iter().any(|a| a == "sh"),
        "{BUSYBOX} has no sh applet: install busybox-static"
    );
    Ok(applets)
}

fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn blob_path(digest: &str) -> String {
    format!(
        "blobs/sha256/{}",
        digest.strip_prefix("sha256:").unwrap_or(digest)
    )
}

fn file_header(size: u64, mode: u32) -> tar::Header {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    header.set_mode(mode);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}

fn dir_header(mode: u32) -> tar::Header {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_size(0);
    header.set_mode(mode);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}

fn append_dir<W: Write>(tar: &mut tar::Builder<W>, path: &str) -> Result<()> {
    let mut header = dir_header(0o755);
    tar.append_data(&mut header, path, std::io::empty())?;
    Ok(())
}

fn append_bytes<W: Write>(tar: &mut tar::Builder<W>, path: &str, bytes: &[u8]) -> Result<()> {
    let mut header = file_header(bytes.len() as u64, 0o644);
    tar.append_data(&mut header, path, bytes)?;
    Ok(())
}

/// Passes writes through while hashing them and counting bytes.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> HashingWriter<W> {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    /// `sha256:<hex>` of everything written so far, and its length.
    fn digest(&self) -> (String, u64) {
        (
            format!("sha256:{:x}", self.hasher.clone().finalize()),
            self.written,
        )
    }

    fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn filler_seed(name: &str, size: u64) -> u64 {
    let hash = Sha256::digest(format!("{name}\0{size}").as_bytes());
    u64::from_le_bytes(hash[..8].try_into().expect("8 bytes"))
}

/// `size` bytes from a counter-based splitmix64 generator: byte `i` depends only on the
/// seed and `i` (not on how the reader is called), and gzip cannot shrink them.
struct Filler {
    seed: u64,
    position: u64,
    size: u64,
}

impl Filler {
    fn new(seed: u64, size: u64) -> Filler {
        Filler {
            seed,
            position: 0,
            size,
        }
    }

    fn word(&self, index: u64) -> u64 {
        let mut z = self
            .seed
            .wrapping_add(index.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Read for Filler {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let remaining = self.size - self.position;
        let n = buf
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        let mut filled = 0;
        while filled < n {
            let offset = (self.position % 8) as usize;
            let bytes = self.word(self.position / 8).to_le_bytes();
            let take = (8 - offset).min(n - filled);
            buf[filled..filled + take].copy_from_slice(&bytes[offset..offset + take]);
            filled += take;
            self.position += take as u64;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags() {
        assert_eq!(OciImage::busybox("localhost/busybox:local").tag(), "local");
        assert_eq!(OciImage::busybox("localhost:5000/x").tag(), "latest");
        assert_eq!(OciImage::busybox("x:1").tag(), "1");
    }

    #[test]
    fn filler_is_deterministic_and_sized() {
        let mut a = Vec::new();
        Filler::new(7, 1001).read_to_end(&mut a).unwrap();
        let mut b = Vec::new();
        Filler::new(7, 1001).read_to_end(&mut b).unwrap();
        assert_eq!(a.len(), 1001);
        assert_eq!(a, b);
        // Read in odd pieces: the same bytes.
        let mut d = vec![0u8; 1001];
        let mut filler = Filler::new(7, 1001);
        let mut at = 0;
        for piece in [3, 5, 13, 1000] {
            let end = (at + piece).min(d.len());
            at += filler.read(&mut d[at..end]).unwrap();
        }
        assert_eq!(at, 1001);
        assert_eq!(a, d);
        let mut c = Vec::new();
        Filler::new(8, 1001).read_to_end(&mut c).unwrap();
        assert_ne!(a, c);
    }
}
