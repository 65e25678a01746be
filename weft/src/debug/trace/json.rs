//! The trace's file: Chrome trace-event JSON, written from a stopped session's logs.
//!
//! Owns: nothing that lives on; `Recorded::write_json` turns a [`super::Recorded`] into the
//! file, its events by track and time, with the flow arrows from spawns and wakes to runs.
//!
//! Invariants: debug/trace/mod.rs 5 (each track sorted by time, times mapped by the
//! session's `Timebase`). Strings from users (task names) are escaped (`push_json_string`).
//!
//! May call: nothing outside `trace`. Called by: `trace` (`trace`, `trace_json`).
//!
//! Why bytes appended by hand rather than `write!`: the `fmt` machinery cost ≈9,000
//! instructions an event, ≈2,000 this way, and a session may hold 4 Mi events; serde_json is
//! not a dependency of weft.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use super::{
    Ended, Event, IdHasher, Kind, Recorded, TaskMap, ThreadLog, Timebase, TraceSummary,
    FROM_INJECTOR, MAX_EVENTS,
};

/// Appends `n` in decimal.
fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Appends `ns` nanoseconds as microseconds with three decimals (exact).
fn push_micros(out: &mut Vec<u8>, ns: u64) {
    push_u64(out, ns / 1000);
    let frac = ns % 1000;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// Appends `s` as a JSON string, quotes included.
fn push_json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let c = c as usize;
                out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[c >> 4], HEX[c & 15]]);
            }
            c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out.push(b'"');
}

/// Buffered JSON output: events are appended as bytes and written out in large pieces (the
/// `fmt` machinery cost ≈9,000 instructions per event).
struct JsonOut<'a, W: Write> {
    inner: &'a mut W,
    buf: Vec<u8>,
    bytes: u64,
}

impl<W: Write> JsonOut<'_, W> {
    const FLUSH_AT: usize = 1 << 16;

    fn s(&mut self, s: &str) -> &mut Self {
        self.buf.extend_from_slice(s.as_bytes());
        self
    }

    fn n(&mut self, n: u64) -> &mut Self {
        push_u64(&mut self.buf, n);
        self
    }

    fn us(&mut self, ns: u64) -> &mut Self {
        push_micros(&mut self.buf, ns);
        self
    }

    fn json(&mut self, s: &str) -> &mut Self {
        push_json_string(&mut self.buf, s);
        self
    }

    /// An event's place on the timeline: `"pid":…,"tid":…,"ts":…` (`ts` in µs from `ns`).
    fn place(&mut self, pid: u64, tid: u64, ns: u64) -> &mut Self {
        self.s("\"pid\":")
            .n(pid)
            .s(",\"tid\":")
            .n(tid)
            .s(",\"ts\":")
            .us(ns)
    }

    /// Ends one event: writes the buffer out once it is large.
    fn end(&mut self) -> io::Result<()> {
        if self.buf.len() >= Self::FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.write_all(&self.buf)?;
        self.bytes += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }
}

/// Sorts one track's events by time, stably. Pushed at their ends, run slices come after the
/// few instants recorded inside them, and are otherwise in order: an insertion sort moves each
/// slice back past those (the library's sort took ≈1,700 instructions per event on this
/// input, which it sees as many short runs). A track that needs many more moves than that —
/// a task that spawned thousands inside one run — falls back to the library's.
fn sort_by_time(events: &mut [Event]) {
    let limit = events.len().saturating_mul(32);
    let mut moves = 0usize;
    for i in 1..events.len() {
        let mut j = i;
        while j > 0 && events[j - 1].at > events[j].at {
            events.swap(j - 1, j);
            j -= 1;
        }
        moves += i - j;
        if moves > limit {
            events.sort_by_key(|e| e.at);
            return;
        }
    }
}

/// A task's name and site, as JSON strings, made once per task.
struct TaskJson {
    name: Vec<u8>,
    site: Vec<u8>,
}

impl Recorded {
    /// Writes the trace; the events of each track sorted by time (invariant 5).
    pub(super) fn write_json(self, out: &mut impl Write) -> io::Result<TraceSummary> {
        let mut out = JsonOut {
            inner: out,
            buf: Vec::with_capacity(JsonOut::<Vec<u8>>::FLUSH_AT + 4096),
            bytes: 0,
        };
        let pid = u64::from(std::process::id());
        let mut summary = TraceSummary {
            recorded: Duration::from_nanos(self.end.0.saturating_sub(self.start.0)),
            ..TraceSummary::default()
        };
        let mut tasks: TaskMap = HashMap::default();
        let mut tracks: Vec<(Arc<ThreadLog>, Vec<Event>)> = Vec::new();
        for (log, inner) in self.tracks {
            summary.dropped += inner.dropped;
            let mut events: Vec<Event> = inner.chunks.into_iter().flatten().collect();
            if events.is_empty() && inner.tasks.is_empty() {
                continue;
            }
            sort_by_time(&mut events);
            tasks.extend(inner.tasks);
            tracks.push((log, events));
        }
        tracks.sort_by_key(|(log, _)| log.sort_index);
        let task_json: HashMap<u64, TaskJson, BuildHasherDefault<IdHasher>> = tasks
            .iter()
            .map(|(id, info)| {
                let mut name = Vec::new();
                match &info.name {
                    Some(n) => push_json_string(&mut name, n),
                    None => name.extend_from_slice(format!("\"task {id}\"").as_bytes()),
                }
                let mut site = Vec::new();
                push_json_string(&mut site, &info.site.to_string());
                (*id, TaskJson { name, site })
            })
            .collect();
        // Each task's runs, by start, for the arrows from its spawns and wakes.
        let mut runs: HashMap<u64, Vec<(u64, i32)>, BuildHasherDefault<IdHasher>> =
            HashMap::default();
        for (log, events) in &tracks {
            for e in events.iter().filter(|e| e.kind == Kind::Run) {
                runs.entry(e.task).or_default().push((e.at, log.tid));
            }
        }
        for list in runs.values_mut() {
            list.sort_unstable();
        }
        let mut seen = std::collections::HashSet::<u64, BuildHasherDefault<IdHasher>>::default();

        out.s("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")
            .s("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":")
            .n(pid)
            .s(",\"tid\":0,\"args\":{\"name\":\"weft\"}}");
        for (log, _) in &tracks {
            summary.threads += 1;
            summary.workers += usize::from(log.worker);
            let tid = log.tid as u64;
            out.s(",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":")
                .n(pid)
                .s(",\"tid\":")
                .n(tid)
                .s(",\"args\":{\"name\":")
                .json(&log.label)
                .s("}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":")
                .n(pid)
                .s(",\"tid\":")
                .n(tid)
                .s(",\"args\":{\"sort_index\":")
                .n(log.sort_index)
                .s("}}");
        }
        let mut flows = 0u64;
        let time = Timebase::new(self.start, self.end);
        for (log, events) in &tracks {
            let tid = log.tid as u64;
            for e in events {
                summary.events += 1;
                if e.task != 0 {
                    seen.insert(e.task);
                }
                let at = time.ns(e.at);
                let task = e.task;
                match e.kind {
                    Kind::Run => {
                        out.s(",\n{\"ph\":\"X\",\"cat\":\"task\",\"name\":");
                        match task_json.get(&task) {
                            Some(t) => out.buf.extend_from_slice(&t.name),
                            None => {
                                out.s("\"task ").n(task).s("\"");
                            }
                        }
                        out.s(",")
                            .place(pid, tid, at)
                            .s(",\"dur\":")
                            .us(time.ns(e.end).saturating_sub(at))
                            .s(",\"args\":{\"task\":")
                            .n(task)
                            .s(",\"spawn_site\":");
                        match task_json.get(&task) {
                            Some(t) => out.buf.extend_from_slice(&t.site),
                            None => {
                                out.s("null");
                            }
                        }
                        let (ended, reason) = Ended::from_code(e.detail);
                        out.s(",\"ended\":\"").s(ended).s("\"");
                        if let Some(reason) = reason {
                            out.s(",\"park_reason\":").json(reason);
                        }
                        out.s("}}");
                    }
                    Kind::BlockingCall => {
                        out.s(",\n{\"ph\":\"X\",\"cat\":\"blocking\",\"name\":\"blocking call\",")
                            .place(pid, tid, at)
                            .s(",\"dur\":")
                            .us(time.ns(e.end).saturating_sub(at))
                            .s(",\"args\":{\"task\":")
                            .n(task)
                            .s("}}");
                    }
                    Kind::Spawn | Kind::Wake | Kind::Steal | Kind::HandOff => {
                        let name = match e.kind {
                            Kind::Spawn => "spawn",
                            Kind::Wake => "wake",
                            Kind::Steal => "steal",
                            _ => "blocking hand-off",
                        };
                        out.s(",\n{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"sched\",\"name\":\"")
                            .s(name)
                            .s("\",")
                            .place(pid, tid, at)
                            .s(",\"args\":{\"task\":")
                            .n(task);
                        match e.kind {
                            Kind::Spawn | Kind::Wake => {
                                out.s(",\"by\":").n(e.other);
                            }
                            Kind::Steal if e.other == FROM_INJECTOR => {
                                out.s(",\"from\":\"injector\"");
                            }
                            Kind::Steal => {
                                out.s(",\"from\":\"worker ").n(e.other).s("\"");
                            }
                            _ => {}
                        }
                        out.s("}}");
                        if matches!(e.kind, Kind::Spawn | Kind::Wake) {
                            // The arrow to the task's next run (flow events that bind to the
                            // enclosing slice at both ends).
                            let next = runs.get(&task).and_then(|list| {
                                let i = list.partition_point(|(run_at, _)| *run_at < e.at);
                                list.get(i)
                            });
                            if let Some(&(run_at, run_tid)) = next {
                                flows += 1;
                                out.s(",\n{\"ph\":\"s\",\"cat\":\"flow\",\"name\":\"")
                                    .s(name)
                                    .s("\",\"id\":")
                                    .n(flows)
                                    .s(",")
                                    .place(pid, tid, at)
                                    .s("},\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"flow\",\"name\":\"")
                                    .s(name)
                                    .s("\",\"id\":")
                                    .n(flows)
                                    .s(",")
                                    .place(pid, run_tid as u64, time.ns(run_at))
                                    .s("}");
                            }
                        }
                    }
                }
                out.end()?;
            }
        }
        summary.tasks = seen.len();
        out.s("\n],\"otherData\":{\"producer\":\"weft ")
            .s(env!("CARGO_PKG_VERSION"))
            .s("\",\"recorded_us\":")
            .us(self.end.0.saturating_sub(self.start.0))
            .s(",\"events\":")
            .n(summary.events)
            .s(",\"dropped_events\":")
            .n(summary.dropped)
            .s(",\"max_events\":")
            .n(MAX_EVENTS as u64)
            .s(",\"workers\":")
            .n(summary.workers as u64)
            .s(",\"threads\":")
            .n(summary.threads as u64)
            .s("}}\n");
        out.flush()?;
        summary.bytes = out.bytes;
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_string(s: &str) -> String {
        let mut out = Vec::new();
        push_json_string(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    fn micros(ns: u64) -> String {
        let mut out = Vec::new();
        push_micros(&mut out, ns);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn json_string_escapes_quotes_backslashes_and_controls() {
        assert_eq!(
            json_string("a\"b\\c\nd\u{1}\u{1f}é"),
            r#""a\"b\\c\nd\u0001\u001fé""#
        );
    }

    #[test]
    fn micros_are_exact_nanoseconds() {
        assert_eq!(micros(0), "0.000");
        assert_eq!(micros(1_234_567), "1234.567");
        assert_eq!(micros(999), "0.999");
        assert_eq!(micros(u64::MAX), "18446744073709551.615");
    }

    #[test]
    fn sort_by_time_moves_slices_before_the_instants_inside_them() {
        let event = |at, kind| Event {
            at,
            end: at,
            task: 0,
            other: 0,
            kind,
            detail: 0,
        };
        let mut events = vec![
            event(5, Kind::Wake),
            event(7, Kind::Spawn),
            event(4, Kind::Run),
            event(9, Kind::Wake),
            event(9, Kind::Spawn),
            event(8, Kind::Run),
        ];
        sort_by_time(&mut events);
        let order: Vec<_> = events.iter().map(|e| (e.at, e.kind)).collect();
        assert_eq!(
            order,
            [
                (4, Kind::Run),
                (5, Kind::Wake),
                (7, Kind::Spawn),
                (8, Kind::Run),
                (9, Kind::Wake),
                (9, Kind::Spawn),
            ]
        );
        // Far out of order: the fallback sorts it too.
        let mut reversed: Vec<_> = (0..1000).rev().map(|at| event(at, Kind::Wake)).collect();
        sort_by_time(&mut reversed);
        assert!(reversed.windows(2).all(|w| w[0].at <= w[1].at));
    }
}
