//! A writer for the "newc" cpio format, the only archive format the kernel unpacks into
//! its initramfs (kernel: Documentation/driver-api/early-userspace/buffer-format.rst).
//!
//! Written here rather than piped through `cpio -o` so the archive can hold a character
//! device (`/dev/console`) and files owned by root without the host needing `cpio`,
//! `mknod` or root. The archive is left uncompressed: the kernel always accepts that, and
//! under TCG emulation skipping gzip inflation saves seconds per boot.
use std::io::{self, Read, Write};

/// Header magic of the newc format (no checksum).
const MAGIC: &[u8; 6] = b"070701";
/// Name of the entry that ends every archive.
const TRAILER: &str = "TRAILER!!!";

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFCHR: u32 = 0o020_000;

/// Builds an archive entry by entry; call [`Writer::finish`] to append the trailer.
pub struct Writer<W: Write> {
    out: W,
    /// Bytes written so far; every header and every data block starts 4-byte aligned.
    offset: u64,
    next_ino: u32,
}

/// What one header describes, besides its name.
struct Header {
    mode: u32,
    nlink: u32,
    file_size: u32,
    rdev: (u32, u32),
}

impl<W: Write> Writer<W> {
    pub fn new(out: W) -> Self {
        Self {
            out,
            offset: 0,
            next_ino: 1,
        }
    }

    /// A directory; parents must be added before their children.
    pub fn dir(&mut self, name: &str, perm: u32) -> io::Result<()> {
        let header = Header {
            mode: S_IFDIR | perm,
            nlink: 2,
            file_size: 0,
            rdev: (0, 0),
        };
        self.header(name, &header)
    }

    /// A regular file whose content is `len` bytes read from `content`.
    pub fn file(&mut self, name: &str, perm: u32, len: u64, content: impl Read) -> io::Result<()> {
        let file_size = u32::try_from(len).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name}: {len} bytes is too large for newc cpio"),
            )
        })?;
        let header = Header {
            mode: S_IFREG | perm,
            nlink: 1,
            file_size,
            rdev: (0, 0),
        };
        self.header(name, &header)?;
        let copied = io::copy(&mut content.take(len), &mut self.out)?;
        if copied != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{name}: expected {len} bytes, read {copied}"),
            ));
        }
        self.offset += copied;
        self.pad()
    }

    /// A character device node, e.g. `dev/console` (5, 1), which the kernel opens as the
    /// initial console before running `/init`.
    pub fn char_device(&mut self, name: &str, perm: u32, major: u32, minor: u32) -> io::Result<()> {
        let header = Header {
            mode: S_IFCHR | perm,
            nlink: 1,
            file_size: 0,
            rdev: (major, minor),
        };
        self.header(name, &header)
    }

    /// Appends the trailer and returns the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        let header = Header {
            mode: 0,
            nlink: 1,
            file_size: 0,
            rdev: (0, 0),
        };
        self.header(TRAILER, &header)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn header(&mut self, name: &str, header: &Header) -> io::Result<()> {
        if name.is_empty() || name.starts_with('/') || name.as_bytes().contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cpio entry name {name:?} must be relative, non-empty and without NUL"),
            ));
        }
        let ino = if name == TRAILER { 0 } else { self.next_ino };
        self.next_ino = self.next_ino.saturating_add(1);
        // The name size counts the terminating NUL.
        let name_size = u32::try_from(name.len() + 1).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name}: name too long"),
            )
        })?;
        let fields = [
            ino,
            header.mode,
            0, // uid: root
            0, // gid: root
            header.nlink,
            0, // mtime: fixed, so identical inputs give identical archives
            header.file_size,
            0, // dev major
            0, // dev minor
            header.rdev.0,
            header.rdev.1,
            name_size,
            0, // check: unused by newc
        ];
        let mut text = String::with_capacity(110);
        for field in fields {
            text.push_str(&format!("{field:08x}"));
        }
        self.write(MAGIC)?;
        self.write(text.as_bytes())?;
        self.write(name.as_bytes())?;
        self.write(&[0])?;
        self.pad()
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Pads with NULs to the next multiple of 4 bytes.
    fn pad(&mut self) -> io::Result<()> {
        let rem = (self.offset % 4) as usize;
        if rem != 0 {
            self.write(&[0u8; 3][..4 - rem])?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    /// One entry read back from an archive: (name, mode, rdev, data).
    type Entry = (String, u32, (u32, u32), Vec<u8>);

    /// A minimal newc reader, independent of the writer, to check what the kernel would see.
    fn read_back(archive: &[u8]) -> Vec<Entry> {
        let field = |at: usize, i: usize| {
            let start = at + 6 + i * 8;
            let text = std::str::from_utf8(&archive[start..start + 8]).expect("hex field is ascii");
            u32::from_str_radix(text, 16).expect("hex field parses")
        };
        let align = |n: usize| n.div_ceil(4) * 4;
        let mut entries = Vec::new();
        let mut at = 0;
        loop {
            assert_eq!(&archive[at..at + 6], MAGIC, "magic at offset {at}");
            let (mode, size, rdev, name_size) = (
                field(at, 1),
                field(at, 6),
                (field(at, 9), field(at, 10)),
                field(at, 11),
            );
            let name_start = at + 110;
            let name = String::from_utf8(
                archive[name_start..name_start + name_size as usize - 1].to_vec(),
            )
            .expect("name is utf-8");
            assert_eq!(
                archive[name_start + name_size as usize - 1],
                0,
                "name of {name} ends in NUL"
            );
            let data_start = align(name_start + name_size as usize);
            let data = archive[data_start..data_start + size as usize].to_vec();
            at = align(data_start + size as usize);
            if name == TRAILER {
                assert_eq!(at, archive.len(), "trailer is the last entry");
                return entries;
            }
            entries.push((name, mode, rdev, data));
        }
    }

    #[rstest]
    #[case::empty_file("a", b"")]
    #[case::one_byte_name_pads_header("b", b"x")]
    #[case::unaligned_data("bin/init", b"#!/bin/sh\necho hi\n")]
    #[case::aligned_data("dddd", b"1234")]
    fn regular_files_read_back_with_content_and_alignment(
        #[case] name: &str,
        #[case] content: &[u8],
    ) {
        let mut writer = Writer::new(Vec::new());
        writer
            .file(name, 0o755, content.len() as u64, content)
            .expect("write file");
        let archive = writer.finish().expect("finish");
        assert_eq!(archive.len() % 4, 0, "archive length is 4-aligned");
        let entries = read_back(&archive);
        assert_eq!(
            entries,
            vec![(name.to_string(), S_IFREG | 0o755, (0, 0), content.to_vec())]
        );
    }

    #[test]
    fn directories_and_devices_keep_their_type() {
        let mut writer = Writer::new(Vec::new());
        writer.dir("dev", 0o755).expect("dir");
        writer
            .char_device("dev/console", 0o600, 5, 1)
            .expect("device");
        let entries = read_back(&writer.finish().expect("finish"));
        assert_eq!(
            entries,
            vec![
                ("dev".to_string(), S_IFDIR | 0o755, (0, 0), vec![]),
                ("dev/console".to_string(), S_IFCHR | 0o600, (5, 1), vec![]),
            ]
        );
    }

    #[rstest]
    #[case::absolute("/init")]
    #[case::empty("")]
    #[case::nul("a\0b")]
    fn names_the_kernel_would_misplace_are_refused(#[case] name: &str) {
        let mut writer = Writer::new(Vec::new());
        let err = writer.dir(name, 0o755).expect_err("name must be refused");
        assert_eq!(
            err.kind(),
            io::ErrorKind::InvalidInput,
            "error for {name:?}: {err}"
        );
    }

    #[test]
    fn short_content_is_an_error_not_a_corrupt_archive() {
        let mut writer = Writer::new(Vec::new());
        let err = writer
            .file("f", 0o644, 10, &b"abc"[..])
            .expect_err("short read must fail");
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    }
}
