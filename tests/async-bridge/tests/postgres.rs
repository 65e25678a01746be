//! tokio-postgres from 1,000 weft tasks against a real PostgreSQL server (started by
//! scripts/postgres-server.sh, installed by scripts/install-postgres.sh; skipped with a printed
//! reason when it cannot be had): every query answered right, a transaction held across a
//! weft park is rolled back when its task is cancelled, and a 5 ms ticker on the same weft
//! runtime stays on time while the queries are in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_async_tests::{Postgres, Ticker};

const TASKS: usize = 1000;
const QUERIES: usize = 3;
const CONNECTIONS: usize = 16;

/// Connects `n` clients; each connection's driver runs on tokio (`spawn_future` would park a
/// task for its whole life: a tokio task it is).
fn connect(config: &str, n: usize) -> Vec<Arc<tokio_postgres::Client>> {
    (0..n)
        .map(|_| {
            weft::tokio::block_on(async {
                let (client, connection) = tokio_postgres::connect(config, tokio_postgres::NoTls)
                    .await
                    .expect("cannot connect to postgres");
                tokio::spawn(connection);
                Arc::new(client)
            })
        })
        .collect()
}

#[test]
fn tokio_postgres_from_a_thousand_tasks() {
    let _alone = weft_async_tests::one_at_a_time();
    let Some(server) = Postgres::start_or_skip() else {
        return;
    };
    let config = server.config();
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let ticker = Ticker::start(&rt.handle());
    let start = Instant::now();
    let cpu = weft_async_tests::process_cpu();
    let answered = rt.block_on(move || {
        let clients = connect(&config, CONNECTIONS);
        weft::tokio::block_on(
            clients[0]
                .batch_execute("CREATE TABLE items (id int PRIMARY KEY, owner int NOT NULL);"),
        )
        .unwrap();
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let client = clients[i % CONNECTIONS].clone();
                weft::spawn(move || {
                    // Starts spread over a second, a pause after each query: the load (with the
                    // server's own CPU) stays well below what 2 CPUs can take, so that a late
                    // tick means a blocked worker, not a saturated machine.
                    weft::time::sleep(Duration::from_millis(i as u64 % 1000));
                    for q in 0..QUERIES {
                        let n = (i * QUERIES + q) as i32;
                        let row =
                            weft::tokio::block_on(client.query_one("SELECT $1::int + 1", &[&n]))
                                .expect("query failed");
                        assert_eq!(row.get::<_, i32>(0), n + 1);
                        weft::time::sleep(Duration::from_millis(100));
                    }
                    weft::tokio::block_on(
                        client.execute("INSERT INTO items VALUES ($1, $2)", &[&(i as i32), &1]),
                    )
                    .expect("insert failed");
                    QUERIES + 1
                })
            })
            .collect();
        let answered: usize = tasks.into_iter().map(|t| t.join().unwrap()).sum();
        let count: i64 =
            weft::tokio::block_on(clients[0].query_one("SELECT count(*) FROM items", &[]))
                .unwrap()
                .get(0);
        assert_eq!(count, TASKS as i64);
        answered
    });
    let took = start.elapsed();
    let cpu = weft_async_tests::process_cpu() - cpu;
    let lateness = ticker.stop();
    assert_eq!(answered, TASKS * (QUERIES + 1));
    println!(
        "postgres: {answered} statements from {TASKS} tasks on {CONNECTIONS} connections in \
         {took:?}, this process's CPU {cpu:?}"
    );
    lateness.check("postgres");
}

/// A task opens a transaction, inserts, then parks (a weft sleep) with the transaction on its
/// stack; cancelling it unwinds the stack, and the transaction's drop rolls it back.
#[test]
fn a_cancelled_task_rolls_its_transaction_back() {
    let _alone = weft_async_tests::one_at_a_time();
    let Some(server) = Postgres::start_or_skip() else {
        return;
    };
    let config = server.config();
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let (inserted_tx, inserted) = weft::chan::bounded::<()>(1);
    let setup = config.clone();
    rt.block_on(move || {
        let client = connect(&setup, 1).remove(0);
        weft::tokio::block_on(client.batch_execute("CREATE TABLE t (v int)")).unwrap();
    });
    let cfg = config.clone();
    let writer = rt.spawn(move || {
        let mut client = match Arc::try_unwrap(connect(&cfg, 1).remove(0)) {
            Ok(client) => client,
            Err(_) => unreachable!("one owner"),
        };
        let tx = weft::tokio::block_on(client.transaction()).unwrap();
        weft::tokio::block_on(tx.execute("INSERT INTO t VALUES (1)", &[])).unwrap();
        inserted_tx.send(()).unwrap();
        // Parked with the open transaction on this task's stack.
        weft::time::sleep(Duration::from_secs(3600));
        weft::tokio::block_on(tx.commit()).unwrap();
    });
    inserted.recv_timeout(Duration::from_secs(20)).unwrap();
    // Inside the transaction the row exists; outside it does not (yet).
    let count = |rt: &weft::Runtime| {
        let cfg = config.clone();
        rt.block_on(move || {
            let client = connect(&cfg, 1).remove(0);
            weft::tokio::block_on(client.query_one("SELECT count(*) FROM t", &[]))
                .unwrap()
                .get::<_, i64>(0)
        })
    };
    assert_eq!(count(&rt), 0);
    writer.cancel();
    assert!(weft::task::is_cancelled(&*writer.join().unwrap_err()));
    // The rollback was sent by the drop; the server applies it before the next statement of
    // that connection, and the connection closes: wait until the server saw it.
    let cfg = config.clone();
    let open = rt.block_on(move || {
        let client = connect(&cfg, 1).remove(0);
        let start = Instant::now();
        loop {
            let n: i64 = weft::tokio::block_on(client.query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'",
                &[],
            ))
            .unwrap()
            .get(0);
            if n == 0 || start.elapsed() > Duration::from_secs(10) {
                return n;
            }
            weft::time::sleep(Duration::from_millis(10));
        }
    });
    assert_eq!(open, 0, "the cancelled task's transaction is still open");
    assert_eq!(count(&rt), 0, "the cancelled task's insert was committed");
}
