//! Model checks (loom) of weft's cross-thread protocols. Run with
//! `RUSTFLAGS="--cfg loom" cargo test -p weft --lib --release loom` (scripts/test.sh does).

#[cfg(loom)]
mod loom_chan;
#[cfg(loom)]
mod loom_idle;
#[cfg(loom)]
mod loom_image;
#[cfg(loom)]
mod loom_inbox;
#[cfg(loom)]
mod loom_join;
#[cfg(loom)]
mod loom_park;
#[cfg(loom)]
mod loom_sync;
#[cfg(loom)]
mod loom_template;
