//! Stack-growth analysis: from CPU samples and frame sizes to a starting stack size.
//!
//! This module owns the method. A sample is *growth* when its stack passes through
//! `runtime.newstack` (or `runtime.morestack`): the goroutine ran out of stack and the
//! runtime is allocating a bigger one and copying the old one into it (`copystack`). A
//! sample is *shrink* when it passes through `runtime.shrinkstack` (the GC halving an
//! oversized stack) and not through growth. The runtime also enters `newstack` to
//! preempt a goroutine at a function prologue (the stack guard is poisoned); those
//! samples have `gopreempt_m` or `preemptPark` below `newstack`, copy nothing, and are
//! counted apart as *preemption*.
//!
//! For a growth sample, the frames below `newstack`/`morestack` (leaf side) are the
//! runtime's; the first frame above them is the function whose prologue found the stack
//! too small (Go 1.27 profiles show `newstack` directly under it; earlier ones show
//! `morestack` in between). That function and its callers up to the goroutine's root
//! (`runtime.goexit`) form the *chain*, and the chain's *need* is what the goroutine
//! needed at that moment:
//!
//! ```text
//! need = start reserve + Σ frame(f) for each non-inlined f in the chain + guard
//! ```
//!
//! where `frame(f)` comes from the binary's pclntab (see [`crate::binary`]), the start
//! reserve is what `newproc1` leaves above the first frame, and the guard is the runtime's
//! `StackGuard` (928 bytes on linux/amd64 and arm64 since Go 1.18, doubled under -race):
//! the room a prologue requires below its frame before it calls `morestack`.
//! `runtime.goexit` is the root sentinel the runtime plants as the first return address,
//! not a frame, and counts 0.
//!
//! A starting stack of size S avoids every growth whose need is at most S, so the
//! recommended size is the power of two at or above the need that covers the chosen share
//! of growth samples, weighted by sample value; the growth it would remove is the value of
//! the samples whose need fits.

use crate::binary::{Arch, GoBinary};
use crate::error::{ParseResult, Problem};
use crate::pprof::{Frame, Profile};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};

/// `runtime.StackGuard` on linux for Go 1.18 through 1.27 (`StackNosplitBase` 800 +
/// `StackSmall` 128), without -race.
pub const DEFAULT_GUARD: u32 = 928;
/// Smallest goroutine stack the runtime allocates.
pub const MIN_STACK: u64 = 2048;

const GROWTH: [&str; 3] = [
    "runtime.newstack",
    "runtime.morestack",
    "runtime.morestack_noctxt",
];
const SHRINK: &str = "runtime.shrinkstack";
/// Below `newstack`, these mean it was entered to preempt, not to grow.
const PREEMPT: [&str; 2] = ["runtime.gopreempt_m", "runtime.preemptPark"];
const ROOT: &str = "runtime.goexit";
/// Most PCs the runtime's CPU profiler records per sample (`maxCPUProfStack`). A sample
/// that long whose chain does not end at `runtime.goexit` may have lost its root frames.
pub const PROFILER_DEPTH: usize = 64;

/// Analysis options.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Share (0, 1] of growth sample value the recommended size must cover.
    pub coverage: f64,
    /// Runtime stack guard in bytes.
    pub guard: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            coverage: 0.99,
            guard: DEFAULT_GUARD,
        }
    }
}

/// A part of the profile's total value.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Share {
    /// Sum of sample values (nanoseconds of CPU for CPU profiles).
    pub value: i64,
    /// Number of samples.
    pub samples: usize,
    /// `value` as a fraction of the profile's total.
    pub share: f64,
}

/// What was analysed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inputs {
    /// Go version of the binary (or the pclntab's version range).
    pub go_version: String,
    /// Architecture.
    pub arch: Arch,
    /// Functions in the binary's pclntab.
    pub functions: usize,
    /// Sample type and unit used, e.g. `cpu nanoseconds`.
    pub sample_type: String,
    /// Profile duration in seconds.
    pub duration_seconds: f64,
    /// Samples in the profile.
    pub samples: usize,
    /// Sum of all sample values.
    pub total_value: i64,
}

/// Sample-weighted distribution of growth needs, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Distribution {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

/// The recommended starting stack size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Recommendation {
    /// Requested coverage of growth sample value, (0, 1].
    pub coverage: f64,
    /// The need at that coverage, in bytes.
    pub need_at_coverage: u64,
    /// The recommended starting stack size: a power of two, at least 2 KiB.
    pub size: u64,
    /// Share of growth value whose need fits in `size` (growth it would remove).
    pub removes_growth_share: f64,
    /// The same as a share of the whole profile.
    pub removes_total_share: f64,
}

/// A run of identical frames in a chain (recursion shows as one run).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ChainFrame {
    /// Function name.
    pub function: String,
    /// Its frame in bytes (0 when inlined or unknown to the binary).
    pub frame: u32,
    /// True when the call was inlined into its caller.
    pub inlined: bool,
    /// Consecutive repetitions.
    pub repeat: usize,
}

/// One call chain that reached stack growth.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Chain {
    /// The function whose prologue asked for more stack.
    pub grew: String,
    /// Stack need in bytes: start reserve + frames + guard.
    pub need: u64,
    /// Sum of the chain's frames in bytes.
    pub frames_bytes: u64,
    /// Non-inlined frames in the chain.
    pub depth: usize,
    /// True when a sample of the chain has as many PCs as the profiler records
    /// ([`PROFILER_DEPTH`]) and the chain does not end at `runtime.goexit` (Go 1.27 leaves
    /// `goexit` out of profiles): its root frames may be lost, its need is a lower bound.
    pub truncated: bool,
    /// Samples on this chain and their value.
    pub growth: Share,
    /// The chain from the growing function up to the root, runs of repeats folded.
    pub stack: Vec<ChainFrame>,
}

/// A function with a large frame on growth chains.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hog {
    /// Function name.
    pub function: String,
    /// Its frame in bytes.
    pub frame: u32,
    /// Most activations of it in one chain.
    pub max_repeat: usize,
    /// Growth samples whose chain holds it, and their value.
    pub growth: Share,
}

/// The result of [`analyze`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// What was analysed.
    pub inputs: Inputs,
    /// Runtime guard used, bytes.
    pub guard: u32,
    /// Start reserve used, bytes.
    pub start_reserve: u32,
    /// CPU in stack growth (`morestack`/`newstack`/`copystack` and below).
    pub growth: Share,
    /// CPU in stack shrinking (`shrinkstack` and below).
    pub shrink: Share,
    /// CPU in prologue preemption through `newstack` (`gopreempt_m`, `preemptPark`):
    /// not growth, left out of it.
    pub preempt: Share,
    /// Distribution of needs over growth samples (absent without growth).
    pub need: Option<Distribution>,
    /// Recommended starting stack size (absent without growth).
    pub recommendation: Option<Recommendation>,
    /// Growth chains, by value, largest first.
    pub chains: Vec<Chain>,
    /// Growth chains cut short by the profiler's depth limit.
    pub truncated_chains: usize,
    /// Functions on growth chains, largest frame first.
    pub hogs: Vec<Hog>,
    /// A note when the profile's build ID differs from the binary's (printed to stderr,
    /// not part of the report, so a stripped or PIE rebuild reports the same).
    #[serde(skip)]
    pub build_id_note: Option<String>,
}

/// Frame sizes by function name, as profiles spell names.
struct Frames<'a> {
    exact: HashMap<&'a str, u32>,
    generic: HashMap<String, u32>,
}

/// Go prints instantiated generic functions as `pkg.F[...]`; the pclntab holds
/// `pkg.F[go.shape.int]`. Both map to the `[...]` form.
fn generic_form(name: &str) -> Option<String> {
    let open = name.find('[')?;
    let close = name.rfind(']')?;
    (close > open).then(|| format!("{}[...]{}", &name[..open], &name[close + 1..]))
}

impl<'a> Frames<'a> {
    fn new(b: &'a GoBinary) -> Self {
        let mut exact = HashMap::new();
        let mut generic: HashMap<String, u32> = HashMap::new();
        for f in &b.funcs {
            let e = exact.entry(f.name.as_str()).or_insert(0);
            *e = (*e).max(f.frame);
            if let Some(g) = generic_form(&f.name) {
                let e = generic.entry(g).or_insert(0);
                *e = (*e).max(f.frame);
            }
        }
        Frames { exact, generic }
    }

    fn get(&self, name: &str) -> Option<u32> {
        self.exact
            .get(name)
            .copied()
            .or_else(|| self.generic.get(&generic_form(name)?).copied())
    }
}

fn share(value: i64, samples: usize, total: i64) -> Share {
    Share {
        value,
        samples,
        share: if total > 0 {
            value as f64 / total as f64
        } else {
            0.0
        },
    }
}

/// Analyses `profile` against the frames of `bin`. Fails when the profile does not come
/// from this binary (its sampled functions are not in the binary).
pub fn analyze(bin: &GoBinary, profile: &Profile, opts: &Options) -> ParseResult<Analysis> {
    let frames = Frames::new(bin);
    let is = |f: Frame, names: &[&str]| names.contains(&profile.name(f));
    let total = profile.total();

    let (kind, unit) = &profile.sample_type;
    if kind != "cpu" && kind != "samples" {
        return Err(Problem::new(format!(
            "not a CPU profile: its samples count {kind} ({unit}); take one with runtime/pprof.StartCPUProfile"
        )));
    }
    check_same_binary(profile, &frames)?;
    let build_id_note = match (&profile.main_build_id, &bin.build_id) {
        (Some(p), Some(b)) if p != b => Some(format!(
            "profile build ID {p} differs from the binary's {b}; functions were matched by name"
        )),
        _ => None,
    };

    let reserve = bin.arch.start_reserve();
    let mut growth = (0i64, 0usize);
    let mut shrink = (0i64, 0usize);
    let mut preempt = (0i64, 0usize);
    // chain key (frames from the growing function to the root) -> (value, samples, cut)
    let mut chains: HashMap<&[Frame], (i64, usize, bool)> = HashMap::new();
    for s in &profile.samples {
        match s.frames.iter().position(|&f| is(f, &GROWTH)) {
            Some(i) if s.frames[..i].iter().any(|&f| is(f, &PREEMPT)) => {
                preempt.0 = preempt.0.saturating_add(s.value);
                preempt.1 += 1;
            }
            Some(i) => {
                growth.0 = growth.0.saturating_add(s.value);
                growth.1 += 1;
                let start = s.frames[i..]
                    .iter()
                    .position(|&f| !is(f, &GROWTH))
                    .map_or(s.frames.len(), |k| i + k);
                let chain = &s.frames[start..];
                if !chain.is_empty() {
                    let pcs = s.frames.iter().filter(|f| !f.inlined).count();
                    let rooted = chain.last().is_some_and(|&f| profile.name(f) == ROOT);
                    let e = chains.entry(chain).or_default();
                    e.0 = e.0.saturating_add(s.value);
                    e.1 += 1;
                    e.2 |= !rooted && pcs >= PROFILER_DEPTH;
                }
            }
            None if s.frames.iter().any(|&f| is(f, &[SHRINK])) => {
                shrink.0 = shrink.0.saturating_add(s.value);
                shrink.1 += 1;
            }
            None => {}
        }
    }

    let mut out: Vec<Chain> = Vec::new();
    let mut hog_acc: BTreeMap<&str, (u32, usize, i64, usize)> = BTreeMap::new();
    for (chain, &(value, samples, truncated)) in &chains {
        let mut bytes: u64 = 0;
        let mut depth = 0;
        let mut stack: Vec<ChainFrame> = Vec::new();
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for &f in chain.iter() {
            let name = profile.name(f);
            let frame = if f.inlined || name == ROOT {
                0
            } else {
                depth += 1;
                *counts.entry(name).or_default() += 1;
                frames.get(name).unwrap_or(0)
            };
            bytes += u64::from(frame);
            match stack.last_mut() {
                Some(last) if last.function == name && last.inlined == f.inlined => {
                    last.repeat += 1
                }
                _ => stack.push(ChainFrame {
                    function: name.to_string(),
                    frame,
                    inlined: f.inlined,
                    repeat: 1,
                }),
            }
        }
        for (name, n) in counts {
            let e = hog_acc
                .entry(name)
                .or_insert((frames.get(name).unwrap_or(0), 0, 0, 0));
            e.1 = e.1.max(n);
            e.2 = e.2.saturating_add(value);
            e.3 += samples;
        }
        out.push(Chain {
            grew: profile.name(chain[0]).to_string(),
            need: u64::from(reserve) + bytes + u64::from(opts.guard),
            frames_bytes: bytes,
            depth,
            truncated,
            growth: share(value, samples, growth.0),
            stack,
        });
    }
    out.sort_by(|a, b| {
        b.growth
            .value
            .cmp(&a.growth.value)
            .then(b.need.cmp(&a.need))
            .then_with(|| a.stack.len().cmp(&b.stack.len()))
            .then_with(|| a.stack.cmp(&b.stack))
    });

    let weighted: Vec<(u64, i64)> = out.iter().map(|c| (c.need, c.growth.value)).collect();
    let need = distribution(&weighted);
    let recommendation = need.map(|_| {
        let at = percentile(&weighted, opts.coverage);
        let size = at
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX)
            .max(MIN_STACK);
        let fits = weighted
            .iter()
            .filter(|(n, _)| *n <= size)
            .fold(0i64, |a, (_, v)| a.saturating_add(*v));
        Recommendation {
            coverage: opts.coverage,
            need_at_coverage: at,
            size,
            removes_growth_share: if growth.0 > 0 {
                fits as f64 / growth.0 as f64
            } else {
                0.0
            },
            removes_total_share: if total > 0 {
                fits as f64 / total as f64
            } else {
                0.0
            },
        }
    });

    let mut hogs: Vec<Hog> = hog_acc
        .into_iter()
        .filter(|(_, (frame, ..))| *frame > 0)
        .map(|(name, (frame, max_repeat, value, samples))| Hog {
            function: name.to_string(),
            frame,
            max_repeat,
            growth: share(value, samples, growth.0),
        })
        .collect();
    hogs.sort_by(|a, b| {
        b.frame
            .cmp(&a.frame)
            .then(b.growth.value.cmp(&a.growth.value))
            .then_with(|| a.function.cmp(&b.function))
    });

    let (sample_type, unit) = &profile.sample_type;
    Ok(Analysis {
        inputs: Inputs {
            go_version: bin.version_label(),
            arch: bin.arch,
            functions: bin.funcs.len(),
            sample_type: format!("{sample_type} {unit}"),
            duration_seconds: profile.duration_nanos as f64 / 1e9,
            samples: profile.samples.len(),
            total_value: total,
        },
        guard: opts.guard,
        start_reserve: reserve,
        growth: share(growth.0, growth.1, total),
        shrink: share(shrink.0, shrink.1, total),
        preempt: share(preempt.0, preempt.1, total),
        need,
        recommendation,
        truncated_chains: out.iter().filter(|c| c.truncated).count(),
        chains: out,
        hogs,
        build_id_note,
    })
}

/// Fails when the profile's functions are not this binary's: more than a tenth of the
/// distinct sampled functions of the main mapping missing, or any function of a growth
/// chain missing. Frames of other mappings (shared libraries of cgo programs) are not
/// looked for.
fn check_same_binary(profile: &Profile, frames: &Frames<'_>) -> ParseResult<()> {
    let mut seen: HashSet<u32> = HashSet::new();
    let mut missing: Vec<&str> = Vec::new();
    for s in &profile.samples {
        for &f in &s.frames {
            if !f.inlined
                && !f.foreign
                && seen.insert(f.func)
                && frames.get(profile.name(f)).is_none()
            {
                missing.push(profile.name(f));
            }
        }
    }
    if !missing.is_empty() && missing.len() * 10 > seen.len() {
        missing.sort_unstable();
        return Err(Problem::new(format!(
            "profile is not from this binary: {} of {} sampled functions are not in it (e.g. {})",
            missing.len(),
            seen.len(),
            missing[0]
        )));
    }
    let growth_missing = profile.samples.iter().find_map(|s| {
        let i = s
            .frames
            .iter()
            .position(|f| GROWTH.contains(&profile.name(*f)))?;
        s.frames[i..]
            .iter()
            .find(|f| !f.inlined && !f.foreign && frames.get(profile.name(**f)).is_none())
    });
    if let Some(f) = growth_missing {
        return Err(Problem::new(format!(
            "profile is not from this binary: {} on a stack-growth chain is not in it",
            profile.name(*f)
        )));
    }
    Ok(())
}

/// Smallest need whose cumulative weight reaches `p` of the total (weights fall back to
/// counts when every weight is zero).
fn percentile(weighted: &[(u64, i64)], p: f64) -> u64 {
    let mut v: Vec<(u64, i64)> = weighted.to_vec();
    v.sort_unstable();
    let total = v.iter().fold(0i64, |a, x| a.saturating_add(x.1));
    let by_count = total <= 0;
    let total = if by_count {
        v.len() as f64
    } else {
        total as f64
    };
    let mut cum = 0.0;
    for (need, w) in &v {
        cum += if by_count { 1.0 } else { *w as f64 };
        if cum >= p * total - 1e-9 {
            return *need;
        }
    }
    v.last().map_or(0, |x| x.0)
}

fn distribution(weighted: &[(u64, i64)]) -> Option<Distribution> {
    let max = weighted.iter().map(|x| x.0).max()?;
    Some(Distribution {
        p50: percentile(weighted, 0.50),
        p90: percentile(weighted, 0.90),
        p99: percentile(weighted, 0.99),
        max,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binary::FuncFrame;
    use crate::pprof::tests::build;

    fn bin(funcs: &[(&str, u32)]) -> GoBinary {
        GoBinary {
            arch: Arch::Amd64,
            go_version: Some("go1.27.3".into()),
            pclntab_versions: "go1.20+",
            pclntab_location: "test".into(),
            build_id: Some("b1".into()),
            text_start: 0,
            funcs: funcs
                .iter()
                .map(|(n, fr)| FuncFrame {
                    name: n.to_string(),
                    frame: *fr,
                    sp_delta_max: fr - 8,
                    code_size: 1,
                    entry: 0,
                    func_id: 0,
                    wrapper: false,
                })
                .collect(),
        }
    }

    fn sample_bin() -> GoBinary {
        bin(&[
            ("runtime.goexit", 8),
            ("runtime.newstack", 200),
            ("runtime.morestack", 8),
            ("runtime.copystack", 100),
            ("runtime.memmove", 8),
            ("runtime.shrinkstack", 64),
            ("runtime.gopreempt_m", 32),
            ("runtime.schedule", 96),
            ("runtime.gcDrain", 64),
            ("main.handle", 64),
            ("main.recurse", 512),
            ("main.leaf", 4096),
            ("main.work", 32),
            ("main.F[go.shape.int]", 160),
        ])
    }

    #[test]
    fn computes_need_and_recommendation() {
        let leaf: &[&str] = &[
            "runtime.memmove",
            "runtime.copystack",
            "runtime.newstack",
            "main.leaf",
            "main.recurse",
            "main.recurse",
            "main.handle",
            "runtime.goexit",
        ];
        // Go before 1.27: morestack between newstack and the growing function.
        let mid: &[&str] = &[
            "runtime.newstack",
            "runtime.morestack",
            "main.recurse",
            "main.handle",
            "runtime.goexit",
        ];
        let other: &[&str] = &["main.work", "main.handle", "runtime.goexit"];
        let shrink: &[&str] = &[
            "runtime.copystack",
            "runtime.shrinkstack",
            "runtime.gcDrain",
        ];
        let preempt: &[&str] = &[
            "runtime.schedule",
            "runtime.gopreempt_m",
            "runtime.newstack",
            "main.work",
            "main.handle",
        ];
        let p = Profile::parse(&build(
            &[
                (leaf, 60),
                (mid, 20),
                (other, 12),
                (shrink, 5),
                (preempt, 3),
            ],
            "b1",
        ))
        .unwrap();
        let a = analyze(&sample_bin(), &p, &Options::default()).unwrap();
        assert_eq!(a.growth.value, 80);
        assert!((a.growth.share - 0.8).abs() < 1e-9);
        assert_eq!(a.shrink.value, 5);
        assert_eq!(a.preempt.value, 3);
        assert_eq!(a.chains.len(), 2);
        let c = &a.chains[0];
        assert_eq!(c.grew, "main.leaf");
        assert_eq!(c.frames_bytes, 4096 + 512 * 2 + 64);
        assert_eq!(c.need, 32 + 4096 + 1024 + 64 + 928);
        assert!(!c.truncated);
        assert_eq!(c.stack[1].repeat, 2);
        assert_eq!(a.chains[1].grew, "main.recurse");
        assert_eq!(a.chains[1].need, 32 + 512 + 64 + 928);
        let r = a.recommendation.unwrap();
        assert_eq!(r.size, 8192);
        assert!((r.removes_growth_share - 1.0).abs() < 1e-9);
        let d = a.need.unwrap();
        assert_eq!(d.p50, c.need);
        assert_eq!(d.max, c.need);
        assert_eq!(a.hogs[0].function, "main.leaf");
        assert_eq!(a.hogs[1].max_repeat, 2);
        assert!(a.build_id_note.is_none());
    }

    #[test]
    fn low_coverage_picks_smaller_size() {
        let big: &[&str] = &[
            "runtime.newstack",
            "main.leaf",
            "main.handle",
            "runtime.goexit",
        ];
        let small: &[&str] = &[
            "runtime.newstack",
            "main.recurse",
            "main.handle",
            "runtime.goexit",
        ];
        let p = Profile::parse(&build(&[(big, 10), (small, 90)], "")).unwrap();
        let opts = Options {
            coverage: 0.5,
            ..Options::default()
        };
        let a = analyze(&sample_bin(), &p, &opts).unwrap();
        let r = a.recommendation.unwrap();
        assert_eq!(r.size, 2048);
        assert!((r.removes_growth_share - 0.9).abs() < 1e-9);
    }

    #[test]
    fn truncated_chain_is_flagged_and_generics_resolve() {
        let mut s: Vec<&str> = vec!["runtime.newstack", "main.F[...]"];
        s.resize(PROFILER_DEPTH, "main.recurse");
        let p = Profile::parse(&build(&[(&s, 10)], "other")).unwrap();
        let a = analyze(&sample_bin(), &p, &Options::default()).unwrap();
        assert_eq!(a.truncated_chains, 1);
        assert_eq!(
            a.chains[0].frames_bytes,
            160 + 512 * (PROFILER_DEPTH as u64 - 2)
        );
        assert!(a.build_id_note.unwrap().contains("differs"));
    }

    #[test]
    fn profile_of_another_binary_is_rejected() {
        let s: &[&str] = &[
            "runtime.newstack",
            "other.Handler",
            "other.serve",
            "runtime.goexit",
        ];
        let p = Profile::parse(&build(&[(s, 10)], "")).unwrap();
        let e = analyze(&sample_bin(), &p, &Options::default()).unwrap_err();
        assert!(
            e.message().starts_with("profile is not from this binary"),
            "{e}"
        );
    }

    #[test]
    fn chain_order_is_total() {
        let a: &[&str] = &[
            "runtime.newstack",
            "main.recurse",
            "main.work",
            "main.handle",
        ];
        let b: &[&str] = &[
            "runtime.newstack",
            "main.recurse",
            "main.handle",
            "main.work",
        ];
        for order in [[a, b], [b, a]] {
            let p = Profile::parse(&build(&[(order[0], 5), (order[1], 5)], "")).unwrap();
            let r = analyze(&sample_bin(), &p, &Options::default()).unwrap();
            assert_eq!(r.chains[0].need, r.chains[1].need);
            assert_eq!(r.chains[0].stack[1].function, "main.handle");
        }
    }

    #[test]
    fn frames_of_other_mappings_are_not_required() {
        let cgo: &[&str] = &["libc_read+ext", "libc_x+ext", "main.work", "main.handle"];
        let g: &[&str] = &["runtime.newstack", "main.recurse", "main.handle"];
        let p = Profile::parse(&build(&[(cgo, 10), (g, 10)], "")).unwrap();
        let a = analyze(&sample_bin(), &p, &Options::default()).unwrap();
        assert_eq!(a.growth.samples, 1);
    }

    #[test]
    fn no_growth_gives_no_recommendation() {
        let s: &[&str] = &["main.work", "main.handle", "runtime.goexit"];
        let p = Profile::parse(&build(&[(s, 10)], "")).unwrap();
        let a = analyze(&sample_bin(), &p, &Options::default()).unwrap();
        assert_eq!(a.growth.value, 0);
        assert!(a.recommendation.is_none());
        assert!(a.chains.is_empty());
    }
}
