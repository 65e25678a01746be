//! The per-spawn-site stack profile: figures from the sampled depths, the recommended size,
//! and the profile file.
//!
//! Owns: [`StackProfile`], [`SiteProfile`] and the file format:
//!
//! ```text
//! # comment lines start with '#'
//! src/server.rs:42:9<TAB>65536<TAB>tasks=1000<TAB>samples=12<TAB>p50=8192<TAB>...
//! ^ site (file:line:column)  ^ recommended stack size in bytes; the rest is for people
//! ```
//!
//! Invariants:
//! 1. A recommended size is a power of two in `MIN_STACK_SIZE..=MAX_STACK_SIZE`, above
//!    [`MARGIN_NUM`]/[`MARGIN_DEN`] times the deepest sampled stack plus the guard page.
//!
//! May call: `stats.rs` (the sampled sites). Called by: `metrics::stack_profile`, the runtime
//! (writing the profile at its drop), `stats.rs` (applying a profile at a build).
//!
//! # Why the recommendation uses the maximum, with a margin
//! Overflowing a stack aborts the process, so a size from the 99th percentile would crash one
//! task in a hundred. The maximum is of sampled tasks only (stats.rs: the first few per site
//! and worker, then one in 256), and a later input can go deeper: hence the margin of 1.5.
//!
//! # When a site is flagged
//! `near_limit` is set when the recommended size is larger than the site's configured one:
//! its deepest sampled task left no more than half its own depth of headroom (2/3 of the
//! usable stack or more used). The issue asked for "within 25 % of the limit"; weft warns
//! earlier because the maximum is sampled and an overflow is fatal. A site using 40 KiB of
//! a 64 KiB stack (60 KiB usable) is flagged.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::panic::Location;
use std::path::Path;

use super::counters::{SiteKey, SiteSamples, SAMPLES};
use crate::stack::{self, MAX_STACK_SIZE, MIN_STACK_SIZE};

/// The stack profile of every spawn site so far (`weft::metrics::stack_profile`): finished
/// tasks only, since a task's depth is measured when it returns.
pub(crate) fn stack_profile() -> StackProfile {
    let figures = super::stats::collect(true);
    build(&figures.sites, stack::page_size() as u64)
}

/// The safety margin over the deepest sampled stack, as a fraction (module doc).
pub(crate) const MARGIN_NUM: u64 = 3;
pub(crate) const MARGIN_DEN: u64 = 2;

/// One spawn site's tasks and how deep their stacks went.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SiteProfile {
    /// Where the tasks were spawned (`#[track_caller]`).
    pub site: SiteKey,
    /// Tasks started from this site so far.
    pub tasks: u64,
    /// Tasks whose stack depth was measured (stats.rs: every site's first 4 tasks per worker,
    /// then one in 256).
    pub samples: u64,
    /// Median peak stack use of the sampled tasks, bytes, rounded up to a page (0 without
    /// samples).
    pub p50_bytes: u64,
    /// 99th percentile of the same.
    pub p99_bytes: u64,
    /// The largest.
    pub max_bytes: u64,
    /// The site's stack size (slot size, guard page included; the largest its sampled tasks
    /// had; 0 without samples).
    pub configured_bytes: u64,
    /// The stack size weft recommends for the site: the next power of two above the deepest
    /// sampled stack × 1.5 plus the guard page, at least `MIN_STACK_SIZE` (0 without
    /// samples).
    pub recommended_bytes: u64,
    /// The site's deepest sampled task came near its limit: the recommended size is above
    /// the configured one (module doc, "When a site is flagged").
    pub near_limit: bool,
}

/// Every spawn site's [`SiteProfile`], most tasks first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackProfile {
    /// The sites.
    pub sites: Vec<SiteProfile>,
}

/// The recommended stack size for a deepest stack of `max` bytes (invariant 1).
pub(crate) fn recommend(max: u64, page: u64) -> u64 {
    let need = max * MARGIN_NUM / MARGIN_DEN + page;
    // Strictly above the need: a stack filled to its last byte is already an overflow.
    (need + 1)
        .next_power_of_two()
        .clamp(MIN_STACK_SIZE as u64, MAX_STACK_SIZE as u64)
}

/// The `q`-quantile of sampled peaks by nearest rank.
fn quantile(peaks: &std::collections::BTreeMap<u64, u64>, samples: u64, q: f64) -> u64 {
    let rank = ((samples as f64 * q).ceil() as u64).max(1);
    let mut seen = 0;
    for (&peak, &count) in peaks {
        seen += count;
        if seen >= rank {
            return peak;
        }
    }
    0
}

/// Builds the profile from the task counts of live workers and the recorded samples.
pub(crate) fn build(sites: &[(&'static Location<'static>, u64)], page: u64) -> StackProfile {
    // Per position: tasks, and the samples of every `Location` static at that position.
    let mut by_site: HashMap<SiteKey, (u64, Option<SiteSamples>)> = HashMap::new();
    for (site, count) in sites {
        by_site.entry(SiteKey::of(site)).or_default().0 += count;
    }
    {
        let samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
        for s in samples.iter().flat_map(|m| m.values()) {
            let entry = by_site.entry(SiteKey::of(s.site)).or_default();
            entry.0 += s.retired_tasks;
            match &mut entry.1 {
                None => entry.1 = Some(s.clone()),
                Some(merged) => {
                    for (&peak, &n) in &s.peaks {
                        *merged.peaks.entry(peak).or_insert(0) += n;
                    }
                    merged.slot_bytes = merged.slot_bytes.max(s.slot_bytes);
                }
            }
        }
    }
    let mut out: Vec<SiteProfile> = by_site
        .into_iter()
        .map(|(site, (tasks, samples))| match samples {
            Some(s) => site_profile(site, tasks, &s, page),
            None => site_profile(site, tasks, &SiteSamples::new(Location::caller()), page),
        })
        .collect();
    out.sort_by(|a, b| b.tasks.cmp(&a.tasks).then_with(|| a.site.cmp(&b.site)));
    StackProfile { sites: out }
}

fn site_profile(site: SiteKey, tasks: u64, s: &SiteSamples, page: u64) -> SiteProfile {
    let samples: u64 = s.peaks.values().sum();
    let max = s.peaks.keys().next_back().copied().unwrap_or(0);
    let recommended = if samples == 0 {
        0
    } else {
        recommend(max, page)
    };
    SiteProfile {
        site,
        tasks,
        samples,
        p50_bytes: quantile(&s.peaks, samples, 0.50),
        p99_bytes: quantile(&s.peaks, samples, 0.99),
        max_bytes: max,
        configured_bytes: s.slot_bytes,
        recommended_bytes: recommended,
        near_limit: samples > 0 && recommended > s.slot_bytes,
    }
}

impl StackProfile {
    /// The profile of `site`, if it spawned anything.
    pub fn site(&self, site: &Location<'_>) -> Option<&SiteProfile> {
        self.sites.iter().find(|s| s.site.is(site))
    }

    /// The profile in the file format of the module doc, one site per line; sites without
    /// samples are left out (they have no recommendation).
    pub fn to_file_format(&self) -> String {
        let mut out = String::from(
            "# weft stack profile: site, recommended stack size in bytes, then figures for \
             people\n# apply it with RuntimeBuilder::stack_profile(path) or \
             WEFT_STACK_PROFILE=path\n",
        );
        for s in self.sites.iter().filter(|s| s.recommended_bytes > 0) {
            let _ = writeln!(
                out,
                "{}\t{}\ttasks={}\tsamples={}\tp50={}\tp99={}\tmax={}\tconfigured={}\t\
                 near_limit={}",
                s.site,
                s.recommended_bytes,
                s.tasks,
                s.samples,
                s.p50_bytes,
                s.p99_bytes,
                s.max_bytes,
                s.configured_bytes,
                if s.near_limit { "yes" } else { "no" }
            );
        }
        out
    }

    /// Writes [`StackProfile::to_file_format`] to `path` (through a temporary file, renamed,
    /// so that a reader never sees half a profile).
    ///
    /// # Errors
    /// As `std::fs::write` and `std::fs::rename`.
    pub fn write_to(&self, path: &Path) -> io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        std::fs::write(&tmp, self.to_file_format())?;
        std::fs::rename(&tmp, path)
    }

    /// This profile plus the sites of `earlier` that it has no samples for, which keep their
    /// earlier recommendation: a run that did not reach a site does not forget it.
    pub(crate) fn merged_with(mut self, earlier: &[(SiteKey, u64)]) -> StackProfile {
        for (site, recommended) in earlier {
            let measured = self
                .sites
                .iter()
                .any(|s| &s.site == site && s.recommended_bytes > 0);
            if measured {
                continue;
            }
            self.sites.retain(|s| &s.site != site);
            self.sites.push(SiteProfile {
                site: site.clone(),
                tasks: 0,
                samples: 0,
                p50_bytes: 0,
                p99_bytes: 0,
                max_bytes: 0,
                configured_bytes: *recommended,
                recommended_bytes: *recommended,
                near_limit: false,
            });
        }
        self
    }
}

/// Parses a profile file: each site and its recommended size.
///
/// # Errors
/// `InvalidData` naming the line that is not `file:line:column<TAB>bytes...`.
pub(crate) fn parse_profile(text: &str) -> io::Result<Vec<(SiteKey, u64)>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "line {}: expected `file:line:column<TAB>bytes`, found {line:?}",
                    n + 1
                ),
            )
        };
        let mut fields = line.split('\t');
        let site = fields.next().ok_or_else(bad)?;
        let bytes: u64 = fields
            .next()
            .and_then(|b| b.trim().parse().ok())
            .ok_or_else(bad)?;
        let mut parts = site.rsplitn(3, ':');
        let column = parts.next().and_then(|c| c.parse().ok()).ok_or_else(bad)?;
        let line_no = parts.next().and_then(|l| l.parse().ok()).ok_or_else(bad)?;
        let file = parts.next().filter(|f| !f.is_empty()).ok_or_else(bad)?;
        out.push((
            SiteKey {
                file: file.to_owned(),
                line: line_no,
                column,
            },
            bytes,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recommendation_is_the_deepest_stack_with_a_margin_as_a_power_of_two() {
        assert_eq!(recommend(0, 4096), MIN_STACK_SIZE as u64);
        // 16 KiB would do, but no slot is smaller than MIN_STACK_SIZE.
        assert_eq!(recommend(4 << 10, 4096), MIN_STACK_SIZE as u64);
        assert_eq!(recommend(8 << 10, 4096), 32 << 10);
        assert_eq!(recommend(12 << 10, 4096), 32 << 10);
        assert_eq!(recommend(40 << 10, 4096), 128 << 10);
        assert_eq!(recommend(u64::MAX / 4, 4096), MAX_STACK_SIZE as u64);
    }

    #[test]
    fn a_site_that_used_40_of_64_kib_is_near_its_limit() {
        let mut s = SiteSamples::new(Location::caller());
        s.slot_bytes = 64 << 10;
        s.peaks.insert(40 << 10, 1);
        s.peaks.insert(12 << 10, 99);
        let key = SiteKey::of(Location::caller());
        let p = site_profile(key.clone(), 100, &s, 4096);
        assert_eq!(
            (p.p50_bytes, p.p99_bytes, p.max_bytes),
            (12 << 10, 12 << 10, 40 << 10)
        );
        assert!(p.near_limit);
        s.peaks.remove(&(40 << 10));
        assert!(!site_profile(key, 100, &s, 4096).near_limit);
    }

    #[test]
    fn a_profile_file_round_trips() {
        let key = SiteKey {
            file: "src/a b.rs".into(),
            line: 7,
            column: 13,
        };
        let profile = StackProfile::default().merged_with(&[(key.clone(), 32 << 10)]);
        let parsed = parse_profile(&profile.to_file_format()).unwrap();
        assert_eq!(parsed, vec![(key, 32 << 10)]);
        let err = parse_profile("src/main.rs:1\t4096\n").unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}
