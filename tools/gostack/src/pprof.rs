//! Decoding pprof profiles (gzip-compressed `perftools.profiles.Profile` protobuf).
//!
//! This module owns the wire format: the message structs are written by hand with
//! `prost` derives (field numbers from pprof's `profile.proto`), so no `protoc` or build
//! script is needed. It also resolves a profile into what the analysis needs: for each
//! sample its value and its call stack as function names, leaf first, with inlined calls
//! expanded and marked (an inlined call has no frame of its own).
//!
//! Go writes profiles gzip-compressed; an uncompressed protobuf is accepted too, as the
//! pprof tool does. Anything that is neither says so in one line.

use crate::error::{ParseResult, Problem};
use flate2::read::GzDecoder;
use prost::Message;
use std::collections::HashMap;
use std::io::Read;

/// `perftools.profiles.Profile`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbProfile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<PbValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<PbSample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<PbMapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<PbLocation>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<PbFunction>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<PbValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// `ValueType`: indices into the string table.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// `Sample`: location ids leaf first, one value per sample type.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbSample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<PbLabel>,
}

/// `Label`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbLabel {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// `Mapping`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbMapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// `Location`: lines innermost first; the last line is the function the code belongs to.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbLocation {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<PbLine>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// `Line`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbLine {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// `Function`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PbFunction {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// One frame of a resolved stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Index into [`Profile::names`].
    pub func: u32,
    /// True when this call was inlined into the next frame (it has no stack frame).
    pub inlined: bool,
    /// True when the code lies in another mapping than the main executable's (a shared
    /// library or the vDSO in a cgo program): such frames have no pclntab entry.
    pub foreign: bool,
}

/// A resolved sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    /// The chosen value (CPU nanoseconds for Go CPU profiles).
    pub value: i64,
    /// The stack, leaf first.
    pub frames: Vec<Frame>,
}

/// A resolved profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The chosen sample type and unit: `cpu`/`nanoseconds` when present, else
    /// `samples`/`count`, else the profile's default (or last) type.
    pub sample_type: (String, String),
    /// Profile duration in nanoseconds.
    pub duration_nanos: i64,
    /// Function names, indexed by [`Frame::func`].
    pub names: Vec<String>,
    /// The samples.
    pub samples: Vec<Sample>,
    /// Build ID of the main (first) mapping, when recorded.
    pub main_build_id: Option<String>,
}

/// Largest decompressed profile accepted (guards against gzip bombs).
const MAX_DECOMPRESSED: u64 = 1 << 30;

impl Profile {
    /// Decodes a profile file's bytes: gzip-compressed or raw protobuf.
    pub fn parse(bytes: &[u8]) -> ParseResult<Profile> {
        let pb = if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut raw = Vec::new();
            GzDecoder::new(bytes)
                .take(MAX_DECOMPRESSED)
                .read_to_end(&mut raw)
                .map_err(|e| Problem::new(format!("corrupt gzip stream: {e}")))?;
            PbProfile::decode(raw.as_slice())
                .map_err(|e| Problem::new(format!("gzip content is not a pprof protobuf: {e}")))?
        } else {
            match PbProfile::decode(bytes) {
                Ok(pb) if looks_like_profile(&pb) => pb,
                _ => {
                    return Err(Problem::new(
                        "not a pprof profile: not gzip-compressed (no 1f 8b header) and not a profile protobuf",
                    ))
                }
            }
        };
        resolve(pb)
    }

    /// The name of a frame's function.
    pub fn name(&self, f: Frame) -> &str {
        &self.names[f.func as usize]
    }

    /// Sum of all sample values (saturating: values come from untrusted input).
    pub fn total(&self) -> i64 {
        self.samples
            .iter()
            .fold(0i64, |a, s| a.saturating_add(s.value))
    }
}

/// Reads and decodes the profile at `path`.
pub fn load(path: &std::path::Path) -> Result<Profile, crate::Error> {
    let data = std::fs::read(path).map_err(|e| crate::Error::new(path.display(), e.to_string()))?;
    Profile::parse(&data).map_err(|p| p.in_file(path.display()))
}

fn looks_like_profile(pb: &PbProfile) -> bool {
    !pb.sample_type.is_empty() && pb.string_table.first().is_some_and(String::is_empty)
}

fn resolve(pb: PbProfile) -> ParseResult<Profile> {
    if pb.string_table.first().is_none_or(|s| !s.is_empty()) {
        return Err(Problem::new(
            "not a pprof profile: its string table does not start with the empty string",
        ));
    }
    if pb.sample_type.is_empty() {
        return Err(Problem::new(
            "not a pprof profile: it declares no sample types",
        ));
    }
    let strings = &pb.string_table;
    let s = |i: i64| -> ParseResult<&str> {
        usize::try_from(i)
            .ok()
            .and_then(|i| strings.get(i))
            .map(String::as_str)
            .ok_or_else(|| Problem::new(format!("corrupt profile: string index {i} out of range")))
    };
    let mut types = Vec::new();
    for t in &pb.sample_type {
        types.push((s(t.r#type)?.to_string(), s(t.unit)?.to_string()));
    }
    let default = s(pb.default_sample_type)?;
    // CPU time if recorded, else sample counts, else the profile's default, else the last.
    let vi = types
        .iter()
        .position(|(t, _)| t == "cpu")
        .or_else(|| types.iter().position(|(t, _)| t == "samples"))
        .or_else(|| {
            types
                .iter()
                .position(|(t, _)| !default.is_empty() && t == default)
        })
        .unwrap_or(types.len() - 1);

    let mut names: Vec<String> = Vec::new();
    let mut name_ix: HashMap<&str, u32> = HashMap::new();
    let mut funcs: HashMap<u64, u32> = HashMap::new();
    for f in &pb.function {
        let n = s(f.name)?;
        let ix = *name_ix.entry(n).or_insert_with(|| {
            names.push(n.to_string());
            (names.len() - 1) as u32
        });
        funcs.insert(f.id, ix);
    }
    let main_mapping = pb.mapping.first().map(|m| m.id);
    let mut locs: HashMap<u64, Vec<Frame>> = HashMap::new();
    for l in &pb.location {
        let foreign = l.mapping_id != 0 && main_mapping.is_some_and(|m| m != l.mapping_id);
        let mut frames = Vec::with_capacity(l.line.len().max(1));
        for (k, line) in l.line.iter().enumerate() {
            let func = *funcs.get(&line.function_id).ok_or_else(|| {
                Problem::new(format!(
                    "corrupt profile: location {} names missing function {}",
                    l.id, line.function_id
                ))
            })?;
            frames.push(Frame {
                func,
                inlined: k + 1 < l.line.len(),
                foreign,
            });
        }
        if frames.is_empty() {
            // No symbol information: keep the address so the frame is visibly unknown.
            let n = format!("0x{:x}", l.address);
            names.push(n);
            frames.push(Frame {
                func: (names.len() - 1) as u32,
                inlined: false,
                foreign,
            });
        }
        locs.insert(l.id, frames);
    }
    let mut samples = Vec::with_capacity(pb.sample.len());
    for (i, smp) in pb.sample.iter().enumerate() {
        let value = *smp.value.get(vi).ok_or_else(|| {
            Problem::new(format!(
                "corrupt profile: sample {i} has {} values for {} sample types",
                smp.value.len(),
                types.len()
            ))
        })?;
        let mut frames = Vec::new();
        for id in &smp.location_id {
            frames.extend_from_slice(locs.get(id).ok_or_else(|| {
                Problem::new(format!(
                    "corrupt profile: sample {i} names missing location {id}"
                ))
            })?);
        }
        samples.push(Sample { value, frames });
    }
    let main_build_id = pb
        .mapping
        .first()
        .and_then(|m| s(m.build_id).ok())
        .filter(|b| !b.is_empty())
        .map(str::to_string);
    let (t, u) = types.swap_remove(vi);
    Ok(Profile {
        sample_type: (t, u),
        duration_nanos: pb.duration_nanos,
        names,
        samples,
        main_build_id,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use std::io::Write;

    /// Builds a gzip-compressed CPU profile from stacks of function names (leaf first;
    /// a name ending in `+inl` is inlined into the next one, one ending in `+ext` lies in
    /// a second mapping) with their values.
    pub(crate) fn build(stacks: &[(&[&str], i64)], build_id: &str) -> Vec<u8> {
        let mut st: Vec<String> = vec![String::new()];
        let mut intern = |x: &str| -> i64 {
            if let Some(i) = st.iter().position(|y| y == x) {
                return i as i64;
            }
            st.push(x.to_string());
            (st.len() - 1) as i64
        };
        let samples_t = PbValueType {
            r#type: intern("samples"),
            unit: intern("count"),
        };
        let cpu_t = PbValueType {
            r#type: intern("cpu"),
            unit: intern("nanoseconds"),
        };
        let bid = intern(build_id);
        let mut functions: Vec<PbFunction> = Vec::new();
        let mut locations: Vec<PbLocation> = Vec::new();
        let mut samples = Vec::new();
        for (stack, v) in stacks {
            let mut ids = Vec::new();
            let mut pending: Vec<PbLine> = Vec::new();
            for name in stack.iter() {
                let (n, inl) = match name.strip_suffix("+inl") {
                    Some(n) => (n, true),
                    None => (*name, false),
                };
                let (n, mapping_id) = match n.strip_suffix("+ext") {
                    Some(n) => (n, 2),
                    None => (n, 1),
                };
                let ni = intern(n);
                let fid = match functions.iter().find(|f| f.name == ni) {
                    Some(f) => f.id,
                    None => {
                        let id = functions.len() as u64 + 1;
                        functions.push(PbFunction {
                            id,
                            name: ni,
                            ..Default::default()
                        });
                        id
                    }
                };
                pending.push(PbLine {
                    function_id: fid,
                    line: 1,
                    column: 0,
                });
                if !inl {
                    let id = locations.len() as u64 + 1;
                    locations.push(PbLocation {
                        id,
                        mapping_id,
                        address: 0x40_0000 + id,
                        line: std::mem::take(&mut pending),
                        is_folded: false,
                    });
                    ids.push(id);
                }
            }
            samples.push(PbSample {
                location_id: ids,
                value: vec![1, *v],
                label: vec![],
            });
        }
        let pb = PbProfile {
            sample_type: vec![samples_t, cpu_t],
            sample: samples,
            mapping: vec![
                PbMapping {
                    id: 1,
                    build_id: bid,
                    has_functions: true,
                    ..Default::default()
                },
                PbMapping {
                    id: 2,
                    ..Default::default()
                },
            ],
            location: locations,
            function: functions,
            string_table: st,
            duration_nanos: 1_000_000_000,
            period: 10_000_000,
            ..Default::default()
        };
        let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&pb.encode_to_vec()).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn resolves_stacks_with_inlining() {
        let bytes = build(
            &[(
                &[
                    "runtime.memmove",
                    "runtime.copystack+inl",
                    "runtime.newstack",
                    "main.f",
                ],
                30,
            )],
            "abc",
        );
        let p = Profile::parse(&bytes).unwrap();
        assert_eq!(p.sample_type.0, "cpu");
        assert_eq!(p.total(), 30);
        assert_eq!(p.main_build_id.as_deref(), Some("abc"));
        let fr = &p.samples[0].frames;
        let names: Vec<_> = fr.iter().map(|f| (p.name(*f), f.inlined)).collect();
        assert_eq!(
            names,
            [
                ("runtime.memmove", false),
                ("runtime.copystack", true),
                ("runtime.newstack", false),
                ("main.f", false)
            ]
        );
    }

    #[test]
    fn rejects_non_gzip_non_protobuf() {
        let e = Profile::parse(b"hello, this is text\n").unwrap_err();
        assert!(e.message().contains("not gzip-compressed"), "{e}");
    }

    #[test]
    fn rejects_corrupt_gzip_and_non_profile_gzip() {
        let mut good = build(&[(&["main.f"], 1)], "");
        let n = good.len();
        good.truncate(n / 2);
        let e = Profile::parse(&good).unwrap_err();
        assert!(e.message().contains("gzip"), "{e}");

        let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"\xff\xff\xff\xff plain text inside gzip")
            .unwrap();
        let e = Profile::parse(&gz.finish().unwrap()).unwrap_err();
        assert!(e.message().contains("not a pprof"), "{e}");
    }

    #[test]
    fn accepts_uncompressed_protobuf() {
        let gz = build(&[(&["main.f"], 7)], "");
        let mut raw = Vec::new();
        GzDecoder::new(gz.as_slice()).read_to_end(&mut raw).unwrap();
        assert_eq!(Profile::parse(&raw).unwrap().total(), 7);
    }
}
