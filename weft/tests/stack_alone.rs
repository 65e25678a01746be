//! The stack layer alone: weft/src/stack/ (slots, guards, reclaim, compaction, userfaultfd,
//! the image and cell arenas, the overflow handler) built as the whole of a crate, with the
//! loom facade it names and nothing else of weft, and its own unit tests run there. The
//! layering test (tests/layering.rs) says no path in it names a layer above; this build says
//! the layer compiles and works without the scheduler.

// The stack layer's items are the crate's own here: most of them are for the layers above.
#![allow(dead_code, unused_imports, missing_docs)]

#[path = "../src/loom.rs"]
mod loom;

#[path = "../src/stack/mod.rs"]
mod stack;

/// The layer's entry points work without a runtime: a slot is taken, used and given back.
#[test]
fn a_slot_is_taken_used_and_given_back_without_a_runtime() {
    let class = stack::SizeClass::for_size(64 << 10).expect("a 64 KiB class");
    let slot = stack::Slot::take(class).expect("a slot");
    assert_eq!(slot.size(), 64 << 10);
    drop(slot);
}
