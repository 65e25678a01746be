//! `weft::debug::serve`: `/metrics` parses as Prometheus text with the scheduler counters,
//! the task dump and stack profile are served, and `/` is one self-contained page.

mod common;

use std::time::Duration;

use common::http_get as get;

fn prometheus_value(scrape: &prometheus_parse::Scrape, metric: &str) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| s.metric == metric)
        .and_then(|s| match s.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
}

#[test]
fn metrics_parse_as_prometheus_text_with_scheduler_counters() {
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        let (tx, rx) = weft::chan::bounded::<()>(0);
        for _ in 0..5 {
            let rx = rx.clone();
            rt.spawn(move || rx.recv().ok());
        }
        let server = rt.block_on(|| weft::debug::serve("127.0.0.1:0").unwrap());
        let addr = server.local_addr();
        std::thread::sleep(Duration::from_millis(100));
        let (status, body) = get(addr, "/metrics");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        let scrape =
            prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string()))).unwrap();
        assert!(
            prometheus_value(&scrape, "weft_tasks").unwrap() >= 5.0,
            "{body}"
        );
        assert!(
            prometheus_value(&scrape, "weft_tasks_parked").unwrap() >= 5.0,
            "{body}"
        );
        for metric in [
            "weft_worker_spawns_total",
            "weft_worker_parks_total",
            "weft_worker_wakes_total",
            "weft_worker_steals_total",
            "weft_worker_busy_seconds_total",
            "weft_monitor_warnings_total",
        ] {
            let samples: Vec<_> = scrape
                .samples
                .iter()
                .filter(|s| s.metric == metric)
                .collect();
            assert!(!samples.is_empty(), "{metric} missing:\n{body}");
            assert!(
                samples.iter().all(|s| s.labels.get("runtime").is_some()),
                "{metric} without a runtime label"
            );
        }
        let parks: f64 = scrape
            .samples
            .iter()
            .filter(|s| s.metric == "weft_worker_parks_total")
            .filter_map(|s| match s.value {
                prometheus_parse::Value::Counter(v) => Some(v),
                _ => None,
            })
            .sum();
        assert!(parks >= 5.0, "five tasks parked, counted {parks}:\n{body}");
        drop(tx);
        server.stop();
        drop(rt);
    });
}

#[test]
fn the_endpoint_serves_the_dump_the_stack_profile_and_a_self_contained_page() {
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        let (tx, rx) = weft::chan::bounded::<()>(0);
        rt.spawn(move || rx.recv().ok());
        let server = rt.block_on(|| weft::debug::serve("127.0.0.1:0").unwrap());
        let addr = server.local_addr();
        std::thread::sleep(Duration::from_millis(100));

        let (status, grouped) = get(addr, "/debug/tasks?debug=1");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(grouped.contains("parked [chan receive]"), "{grouped}");
        assert!(grouped.contains("parked [socket accept]"), "{grouped}");
        let (_, full) = get(addr, "/debug/tasks?debug=2");
        assert!(full.contains("\"weft-debug-accept\""), "{full}");

        let (status, stacks) = get(addr, "/debug/stacks");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(stacks.starts_with("# weft stack profile"), "{stacks}");

        let (status, vars) = get(addr, "/debug/vars");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(
            vars.starts_with("{\"time_ms\":") && vars.ends_with("]}"),
            "{vars}"
        );
        for key in [
            "\"compacted\":",
            "\"stack_image_bytes\":",
            "\"stack_template_bytes\":",
            "\"image_bytes_per_task\":",
        ] {
            assert!(vars.contains(key), "{key} missing: {vars}");
        }

        let (status, page) = get(addr, "/");
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(page.contains("<canvas") && page.contains("/debug/vars"));
        assert!(
            page.contains("v.image_bytes_per_task"),
            "the page shows image bytes"
        );
        for external in ["http://", "https://", "src=\"//"] {
            assert!(!page.contains(external), "the page refers to {external}");
        }

        let (status, _) = get(addr, "/nope");
        assert_eq!(status, "HTTP/1.1 404 Not Found");
        drop(tx);
        server.stop();
        drop(rt);
    });
}
