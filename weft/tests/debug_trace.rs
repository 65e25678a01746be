//! `weft::debug::trace`: the file is Chrome trace-event JSON with a track per worker, run
//! slices named by task with how they ended, spawns, wakes, steals and blocking hand-offs
//! whose ids match the slices; one trace at a time; nothing is recorded once it has ended.

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// A trace is process-wide: the tests here take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A task name a JSON writer must escape.
const ODD_NAME: &str = "odd \"name\"\\\n\u{1}é";

fn named<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> weft::JoinHandle<T> {
    weft::task::Builder::new().name(name).spawn(f).unwrap()
}

/// Starts the load the trace records: channel ping-pong, a sleeper, blocking calls, and bursts
/// of spawns that keep some work stealable; everything stops when `stop` is set.
fn start_load(rt: &weft::Runtime, stop: Arc<AtomicBool>) -> Vec<weft::JoinHandle<()>> {
    rt.block_on(move || {
        let mut handles = Vec::new();
        let (ping_tx, ping_rx) = weft::chan::bounded::<u64>(0);
        let (pong_tx, pong_rx) = weft::chan::bounded::<u64>(0);
        handles.push(named("ponger", move || {
            for v in ping_rx.iter() {
                if pong_tx.send(v).is_err() {
                    break;
                }
            }
        }));
        let s = stop.clone();
        handles.push(named("pinger", move || {
            let mut i = 0;
            while !s.load(Ordering::Relaxed) {
                ping_tx.send(i).unwrap();
                pong_rx.recv().unwrap();
                i += 1;
                if i % 64 == 0 {
                    // Room for the other tasks of this worker.
                    weft::time::sleep(Duration::from_micros(200));
                }
            }
        }));
        let s = stop.clone();
        handles.push(named("sleeper", move || {
            while !s.load(Ordering::Relaxed) {
                weft::time::sleep(Duration::from_millis(3));
            }
        }));
        let s = stop.clone();
        handles.push(named("blocker", move || {
            while !s.load(Ordering::Relaxed) {
                weft::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(2)));
            }
        }));
        let s = stop.clone();
        handles.push(named(ODD_NAME, move || {
            while !s.load(Ordering::Relaxed) {
                weft::time::sleep(Duration::from_millis(10));
            }
        }));
        let s = stop.clone();
        handles.push(named("spawner", move || {
            while !s.load(Ordering::Relaxed) {
                let burst: Vec<_> = (0..64)
                    .map(|_| {
                        named("burst", || {
                            // A little work, so that the other worker finds some to steal.
                            let until = std::time::Instant::now() + Duration::from_micros(20);
                            while std::time::Instant::now() < until {
                                std::hint::spin_loop();
                            }
                        })
                    })
                    .collect();
                for task in burst {
                    task.join().unwrap();
                }
                weft::time::sleep(Duration::from_millis(1));
            }
        }));
        handles
    })
}

fn stop_load(rt: &weft::Runtime, stop: &AtomicBool, handles: Vec<weft::JoinHandle<()>>) {
    stop.store(true, Ordering::Relaxed);
    rt.block_on(move || {
        for handle in handles {
            handle.join().unwrap();
        }
    });
}

fn trace_path(test: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("weft-trace-{}-{test}.json", std::process::id()))
}

/// The parsed file, and its events by track.
struct Parsed {
    json: Value,
    names: HashMap<u64, String>,
    by_tid: HashMap<u64, Vec<Value>>,
}

fn parse(text: &str) -> Parsed {
    let json: Value = serde_json::from_str(text).expect("the trace is valid JSON");
    let events = json["traceEvents"].as_array().expect("traceEvents").clone();
    let mut names = HashMap::new();
    let mut by_tid: HashMap<u64, Vec<Value>> = HashMap::new();
    for e in events {
        let tid = e["tid"].as_u64().unwrap();
        if e["ph"] == "M" {
            if e["name"] == "thread_name" {
                let name = e["args"]["name"].as_str().unwrap().to_string();
                assert!(names.insert(tid, name).is_none(), "one name per track");
            }
            continue;
        }
        by_tid.entry(tid).or_default().push(e);
    }
    Parsed {
        json,
        names,
        by_tid,
    }
}

impl Parsed {
    fn all(&self) -> impl Iterator<Item = &Value> {
        self.by_tid.values().flatten()
    }

    fn slices<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.all()
            .filter(move |e| e["ph"] == "X" && e["name"] == name)
    }

    fn instants<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.all()
            .filter(move |e| e["ph"] == "i" && e["name"] == name)
    }

    fn track_named(&self, name: &str) -> Vec<u64> {
        self.names
            .iter()
            .filter(|(_, n)| n.as_str() == name)
            .map(|(tid, _)| *tid)
            .collect()
    }
}

fn ids(events: impl Iterator<Item = impl std::borrow::Borrow<Value>>) -> HashSet<u64> {
    events
        .map(|e| e.borrow()["args"]["task"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_trace_shows_runs_parks_spawns_wakes_steals_and_hand_offs() {
    let _serial = serial();
    common::within(Duration::from_secs(120), || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let handles = start_load(&rt, stop.clone());
        std::thread::sleep(Duration::from_millis(20));
        let path = trace_path("load");
        let target = path.clone();
        // From a task: it sleeps on its worker and writes on the blocking pool.
        let summary = rt
            .block_on(move || weft::debug::trace(Duration::from_millis(200), target))
            .unwrap();
        assert!(!weft::debug::is_tracing());
        stop_load(&rt, &stop, handles);

        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(summary.bytes, text.len() as u64);
        let trace = parse(&text);
        assert_eq!(trace.json["displayTimeUnit"], "ns");
        let other = &trace.json["otherData"];
        assert_eq!(other["events"].as_u64(), Some(summary.events));
        assert_eq!(other["dropped_events"].as_u64(), Some(summary.dropped));
        eprintln!("{summary:?}");

        // One track per worker.
        for worker in ["weft worker 0", "weft worker 1"] {
            assert_eq!(trace.track_named(worker).len(), 1, "{:?}", trace.names);
        }
        assert_eq!(summary.workers, 2);

        // Run slices named by task, with how they ended.
        for name in ["pinger", "ponger", "sleeper", "blocker", "spawner", "burst"] {
            assert!(trace.slices(name).count() > 0, "no slice of {name}");
        }
        assert!(trace.slices(ODD_NAME).count() > 0, "the escaped name");
        let reasons: HashSet<&str> = trace
            .all()
            .filter_map(|e| e["args"]["park_reason"].as_str())
            .collect();
        for reason in ["chan receive", "sleep", "blocking pool", "join"] {
            assert!(reasons.contains(reason), "{reason} not in {reasons:?}");
        }
        let ended: HashSet<&str> = trace
            .all()
            .filter_map(|e| e["args"]["ended"].as_str())
            .collect();
        assert!(
            ended.contains("return") && ended.contains("park"),
            "{ended:?}"
        );
        let site = trace.slices("pinger").next().unwrap()["args"]["spawn_site"]
            .as_str()
            .unwrap();
        assert!(site.contains("debug_trace.rs"), "{site}");

        // Spawns, wakes and steals name tasks that ran in the trace.
        let run_ids = ids(trace.all().filter(|e| e["ph"] == "X" && e["cat"] == "task"));
        let burst_ids = ids(trace.slices("burst"));
        let spawned = ids(trace.instants("spawn"));
        assert!(
            !spawned.is_disjoint(&burst_ids),
            "no spawn of a burst task that ran"
        );
        let woken = ids(trace.instants("wake"));
        let pingpong = ids(trace.slices("pinger").chain(trace.slices("ponger")));
        assert!(!woken.is_disjoint(&pingpong), "no wake of pinger or ponger");
        let stolen = ids(trace.instants("steal"));
        assert!(!stolen.is_empty(), "no steal");
        assert!(stolen.is_subset(&spawned.union(&run_ids).copied().collect()));
        assert!(trace.all().any(|e| e["ph"] == "s") && trace.all().any(|e| e["ph"] == "f"));

        // The blocking pool: hand-offs by the blocker, calls on a pool thread for it.
        let blocker = ids(trace.slices("blocker"));
        assert!(!ids(trace.instants("blocking hand-off")).is_disjoint(&blocker));
        let pool_tracks = trace.track_named("weft blocking pool");
        let calls: Vec<_> = trace.slices("blocking call").collect();
        assert!(!calls.is_empty());
        for call in &calls {
            assert!(pool_tracks.contains(&call["tid"].as_u64().unwrap()));
        }
        assert!(!ids(calls.into_iter()).is_disjoint(&blocker));

        // Per track: times in order; on a worker, slices one after another.
        let recorded = other["recorded_us"].as_f64().unwrap();
        for (tid, events) in &trace.by_tid {
            let mut last_ts = 0.0f64;
            let mut last_end = 0.0f64;
            for e in events.iter().filter(|e| e["ph"] != "f") {
                let ts = e["ts"].as_f64().unwrap();
                assert!(ts >= last_ts, "track {tid} goes back in time at {e}");
                assert!(ts <= recorded + 1.0, "event after the end: {e}");
                last_ts = ts;
                if e["ph"] == "X" && e["cat"] == "task" {
                    assert!(ts + 0.0015 >= last_end, "overlapping slices on {tid}: {e}");
                    last_end = ts + e["dur"].as_f64().unwrap();
                }
            }
        }
    });
}

#[test]
fn a_second_trace_while_one_records_fails_clearly() {
    let _serial = serial();
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(1).build().unwrap();
        let path = trace_path("first");
        let first = {
            let path = path.clone();
            std::thread::spawn(move || weft::debug::trace(Duration::from_millis(300), path))
        };
        while !weft::debug::is_tracing() {
            std::thread::sleep(Duration::from_millis(1));
        }
        // From a task and from a plain thread.
        let in_task =
            rt.block_on(|| weft::debug::trace(Duration::from_millis(10), trace_path("x")));
        let on_thread = weft::debug::trace(Duration::from_millis(10), trace_path("y"));
        for second in [in_task, on_thread] {
            let e = second.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
            assert!(e.to_string().contains("already recording"), "{e}");
        }
        let summary = first.join().unwrap().unwrap();
        assert!(
            summary.events > 0,
            "the first trace saw the task that tried"
        );
        std::fs::remove_file(&path).unwrap();
        // Free again once it has ended.
        let again = trace_path("again");
        weft::debug::trace(Duration::from_millis(10), &again).unwrap();
        std::fs::remove_file(&again).unwrap();
    });
}

#[test]
fn nothing_is_recorded_after_a_trace_ends() {
    let _serial = serial();
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let handles = start_load(&rt, stop.clone());
        let path = trace_path("after");
        let summary = weft::debug::trace(Duration::from_millis(50), &path).unwrap();
        assert!(!weft::debug::is_tracing());
        assert!(summary.events > 0);
        // The load goes on; a trace that ended keeps nothing of it. The next one starts
        // empty: its events all lie within its own recording.
        std::thread::sleep(Duration::from_millis(50));
        let next = trace_path("next");
        let summary = weft::debug::trace(Duration::from_millis(20), &next).unwrap();
        stop_load(&rt, &stop, handles);
        let text = std::fs::read_to_string(&next).unwrap();
        let trace = parse(&text);
        let recorded = trace.json["otherData"]["recorded_us"].as_f64().unwrap();
        assert!(recorded < 1_000_000.0);
        for e in trace.all() {
            let ts = e["ts"].as_f64().unwrap();
            assert!((0.0..=recorded + 1.0).contains(&ts), "{e}");
        }
        assert_eq!(
            trace.json["otherData"]["events"].as_u64(),
            Some(summary.events)
        );
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_file(&next).unwrap();
    });
}

#[test]
fn the_debug_endpoint_serves_a_trace() {
    let _serial = serial();
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let handles = start_load(&rt, stop.clone());
        let server = rt.block_on(|| weft::debug::serve("127.0.0.1:0").unwrap());
        let (status, body) = common::http_get(server.local_addr(), "/debug/trace?seconds=0.1");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        let trace = parse(&body);
        assert!(trace.slices("pinger").count() > 0);
        stop_load(&rt, &stop, handles);
        server.stop();
    });
}
