//! Go build info: the toolchain version and the build settings a Go binary carries.
//!
//! Owns decoding the `.go.buildinfo` blob the Go linker writes into every executable it
//! links (Go 1.18 and later, the form `debug/buildinfo` reads):
//!
//! ```text
//! "\xff Go buildinf:"  ptrSize u8  flags u8  (pad to 32 bytes)
//! flags bit 1 set (inline strings): uvarint len, version ("go1.27.3")
//!                                   uvarint len, modinfo
//! modinfo: 16-byte sentinel, lines "path\t…", "mod\t…", "dep\t…", "build\tKEY=VALUE", 16-byte sentinel
//! ```
//!
//! Invariants:
//! 1. Every read is bounds-checked: a cut or corrupt blob gives `None` or fewer settings,
//!    never a panic.
//! 2. Only the inline-string form (flags bit 1) is decoded; older binaries keep pointers
//!    to the strings instead and have no version here.
//!
//! May call: nothing. Called by: `binary` (the version), `apply` (the version, `GOOS`,
//! `GOARCH`, `DefaultGODEBUG`).
//!
//! Why the settings: `apply` refuses what it has not checked (another `GOOS`, a
//! `GOEXPERIMENT` build), and the build-flag route must keep the module's default GODEBUG
//! (`build\tDefaultGODEBUG=…`), which a `-X=runtime.godebugDefault=` flag would replace.

/// The blob's first bytes.
pub const MAGIC: &[u8] = b"\xff Go buildinf:";
/// Size of the blob's header before the strings.
const HEADER: usize = 32;

/// What a binary's build info says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildInfo {
    /// The toolchain version, as `runtime.Version()` prints it (`go1.27.3`, `go1.27.3
    /// X:nosynchashtriggerbuffer` for a GOEXPERIMENT build, `devel go1.28-…`).
    pub version: String,
    /// The `build` lines of the modinfo: `-buildmode`, `GOOS`, `GOARCH`, `DefaultGODEBUG`, …
    pub settings: Vec<(String, String)>,
}

impl BuildInfo {
    /// Decodes the blob that starts at `d[0]` (the magic); `d` may run past its end.
    pub fn parse(d: &[u8]) -> Option<BuildInfo> {
        if !d.starts_with(MAGIC) || d.get(15)? & 2 == 0 {
            return None;
        }
        let mut p = d.get(HEADER..)?;
        let version = string(&mut p)?;
        if !(version.starts_with("go") || version.starts_with("devel")) {
            return None;
        }
        let settings = string(&mut p).map(|m| settings(&m)).unwrap_or_default();
        Some(BuildInfo { version, settings })
    }

    /// Finds and decodes the blob in a whole file: the first place, at a 16-byte boundary
    /// as the linker aligns it, where the magic starts a blob that decodes.
    pub fn find(data: &[u8]) -> Option<BuildInfo> {
        let mut at = 0;
        while let Some(off) = data
            .get(at..)
            .and_then(|d| d.windows(MAGIC.len()).position(|w| w == MAGIC))
            .map(|o| o + at)
        {
            if off % 16 == 0 {
                if let Some(b) = BuildInfo::parse(&data[off..]) {
                    return Some(b);
                }
            }
            at = off + 1;
        }
        None
    }

    /// The build info of an executable: from its `.go.buildinfo` section, else found by
    /// scanning the whole file (section headers stripped).
    pub fn of_executable(data: &[u8], file: Option<&object::File<'_>>) -> Option<BuildInfo> {
        use object::{Object, ObjectSection};
        file.and_then(|f| f.section_by_name(".go.buildinfo"))
            .and_then(|s| s.data().ok())
            .and_then(BuildInfo::parse)
            .or_else(|| BuildInfo::find(data))
    }

    /// A `build` setting's value (`setting("GOOS")`).
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads a uvarint-prefixed string and moves `p` past it.
fn string(p: &mut &[u8]) -> Option<String> {
    let mut len: u64 = 0;
    let mut used = 0;
    for (i, &b) in p.iter().enumerate().take(9) {
        len |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            used = i + 1;
            break;
        }
    }
    if used == 0 {
        return None;
    }
    let len = usize::try_from(len).ok()?;
    let s = p.get(used..used.checked_add(len)?)?;
    *p = &p[used + len..];
    Some(String::from_utf8_lossy(s).into_owned())
}

/// The `build\tKEY=VALUE` lines of a modinfo string. The sentinels around it are binary
/// and sit on the first line (before `path\t…`) and after the last line break, so they
/// never start a `build` line.
fn settings(modinfo: &str) -> Vec<(String, String)> {
    modinfo
        .lines()
        .filter_map(|l| {
            let (k, v) = l.strip_prefix("build\t")?.split_once('=')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(version: &str, modinfo: &[u8]) -> Vec<u8> {
        let mut d = MAGIC.to_vec();
        d.extend([8u8, 2]);
        d.resize(HEADER, 0);
        d.push(version.len() as u8);
        d.extend(version.as_bytes());
        // Two-byte varint for the modinfo length, as real ones are longer than 127 bytes.
        d.push((modinfo.len() as u8 & 0x7f) | 0x80);
        d.push((modinfo.len() >> 7) as u8);
        d.extend(modinfo);
        d
    }

    fn modinfo(lines: &str) -> Vec<u8> {
        let mut m = b"0w\xaf\x0c\x92t\x08\x02A\xe1\xc1\x07\xe6\xd6\x18\xe6".to_vec();
        m.extend(lines.as_bytes());
        m.extend(b"\xf92C1\x86\x18 r\x00\x82B\x10A\x16\xd8\xf2");
        m
    }

    #[test]
    fn reads_version_and_settings() {
        let m = modinfo(
            "path\tweft.example/x\nbuild\t-buildmode=exe\nbuild\tDefaultGODEBUG=panicnil=1,x509sha1=1\n\
             build\tGOARCH=arm64\nbuild\tGOOS=linux\n",
        );
        let b = BuildInfo::parse(&blob("go1.27.3", &m)).unwrap();
        assert_eq!(b.version, "go1.27.3");
        assert_eq!(b.setting("GOOS"), Some("linux"));
        assert_eq!(b.setting("GOARCH"), Some("arm64"));
        assert_eq!(b.setting("-buildmode"), Some("exe"));
        assert_eq!(b.setting("DefaultGODEBUG"), Some("panicnil=1,x509sha1=1"));
        assert_eq!(b.setting("CGO_ENABLED"), None);
    }

    #[test]
    fn finds_aligned_blob_only() {
        let mut file = vec![0u8; 35];
        file.extend(MAGIC); // unaligned decoy, not a blob
        file.resize(64, 0);
        file.extend(blob("go1.21.13", &modinfo("build\tGOOS=linux\n")));
        let b = BuildInfo::find(&file).unwrap();
        assert_eq!(b.version, "go1.21.13");
    }

    #[test]
    fn cut_blobs_are_none_or_shorter_never_panic() {
        let d = blob("go1.27.3", &modinfo("build\tGOOS=linux\n"));
        for n in 0..d.len() {
            let _ = BuildInfo::parse(&d[..n]);
        }
        assert!(BuildInfo::parse(&d[..HEADER + 3]).is_none());
        let mut old = d.clone();
        old[15] = 0; // pointer form
        assert!(BuildInfo::parse(&old).is_none());
    }
}
