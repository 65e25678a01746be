//! A hierarchical timing wheel: the structure behind a worker's timers (timers.rs), with
//! insert, cancel and "next due" in O(1) whatever the number of timers.
//!
//! Time is counted in ticks of [`TICK_NS`] (1,024 ns) since the wheel's origin. Seven levels
//! of 256 slots each: a slot of level `l` spans 256^l ticks, so level 0 holds the timers of
//! the next 256 ticks (262 µs) one tick per slot, level 1 those of the next 67 ms in slots of
//! 262 µs, level 2 the next 17 s in slots of 67 ms, and so on up to level 6 (slots of 9
//! years). A timer sits at the lowest level whose slot holds its expiry alone among the
//! wheel's current position's: the level of the highest bit group in which its expiry
//! differs from `elapsed`. When the wheel's position reaches a slot of level 1 or more, the
//! slot's timers move down ("cascade"), each at most once per level, or straight to firing
//! when they are due: a timer costs O(levels) moves over its life, O(1) per operation.
//!
//! ```text
//!   elapsed = 0b 00000011 01011110 10010110   (tick)
//!   level 2  |........|  slots of 65,536 ticks (67 ms); the timers of later ones this window
//!   level 1           |........|  slots of 256 ticks (262 µs): the rest of the current 67 ms
//!   level 0                    |........|  one tick each: the rest of the current 262 µs
//! ```
//!
//! Entries live in a slab of fixed chunks (never moved, so growing it copies nothing). Each
//! slot's list is an array of entry keys in no order, and each entry knows its index there:
//! cancelling one moves the list's last key into its place. An array rather than a linked
//! list because a cascade or a batch of firings walks a whole list of entries that are cold
//! at a million timers: from an array their lines are fetched several at a time, from a
//! linked list one miss after another (that walk was 17 % of the CPU of 100K sleepers'
//! wakes with the 1 ms slack and compaction off, `perf record`; the arrays took 0.2–0.3 µs
//! off each of those wakes, 2.5–2.8 → 2.2–2.6 µs).
//!
//! Owns: the slots, the slab, `elapsed`; all touched by the owning worker's thread only.
//!
//! Invariants:
//! 1. Every linked entry sits in the list `link` chose for its expiry, at the index its `pos`
//!    says, and that slot starts after `elapsed` at its level, or is level 0's current slot:
//!    `poll` processes every slot whose start has come before it moves `elapsed` past it.
//! 2. `elapsed` only grows, and only to a time at which no slot that starts earlier is left
//!    occupied (`poll`).
//! 3. A slot's `min` is at most the smallest expiry in it (exact unless an entry was removed
//!    since it was last emptied): the wheel may report a next expiry a little early, never
//!    late.
//! 4. An entry's key stays valid until `remove`, whether or not it fired: the owner of an
//!    entry removes it exactly once, and `poll` only unlinks what fires.
//! 5. `hint` is at most the earliest expiry of the armed entries, and no more than the
//!    earliest occupied slot's expiry as `next_expiry` reads it: `insert` lowers it, a
//!    `poll` that finds nothing more due sets it, `remove` leaves it (early, never late).
//!    A `poll` before it returns at once.
//!
//! May call: `stack::prefetch_line` (a hint). Called by: timers.rs (the worker's timers).
//!
//! Why a wheel and not the ordered map it replaced (`BTreeMap<(deadline, seq), Task>`): the
//! map's insert and remove were O(log n) with a walk through cold nodes at a million
//! sleepers, and it could only hand out timers one at a time in order; the wheel's cost does
//! not grow with the number of timers (measured in the unit bench below and in
//! `weft-bench sleepers`). Why a tick of 1,024 ns: a shift rather than a division, and finer
//! than any timer slack worth asking for, so that precise timers lose nothing to it. Why the
//! per-slot `min`: a worker sleeps until the earliest expiry, and without it a timer in a
//! slot of level 1 or more would wake its worker at the slot's start just to move it down.
//! Why 256 slots a level: a timer due 0.5–5 s ahead moves twice before it fires, not three
//! times, and a level's bitmap is still four words. tokio's wheel (tokio/src/runtime/time/wheel) has the same shape, 6 levels of 1 ms ticks.

use std::time::Instant;

/// Nanoseconds per tick, as a shift.
pub(super) const TICK_SHIFT: u32 = 10;
/// Nanoseconds per tick.
pub(super) const TICK_NS: u64 = 1 << TICK_SHIFT;
/// Bits of a tick per level (256 slots).
const SLOT_BITS: u32 = 8;
const SLOTS: usize = 1 << SLOT_BITS;
/// Words of a level's bitmap of occupied slots.
const WORDS: usize = SLOTS / 64;
const LEVELS: usize = 7;
/// The last tick the wheel holds, 2^54 − 1 (585 years after its origin): a later expiry
/// fires then.
const SPAN_MASK: u64 = (1 << 54) - 1;
/// "No entry".
const NIL: u32 = u32::MAX;
/// The list of a level-0 slot being fired, a slot of its own so that `remove` can unlink
/// from it like from any other.
const FIRING: u16 = (LEVELS * SLOTS) as u16;
/// `Entry::slot` of an entry in no list (fired, or vacant).
const UNLINKED: u16 = u16::MAX;
/// Entries per slab chunk.
const CHUNK_BITS: u32 = 10;
const CHUNK: usize = 1 << CHUNK_BITS;

/// Entries ahead of the one being moved or fired whose lines are prefetched.
const AHEAD: usize = 8;
/// A list that held more keys than this is not kept for reuse once emptied.
const KEEP_CAPACITY: usize = 4096;

#[derive(Clone, Copy)]
struct Entry<T> {
    /// `None` once fired (or vacant).
    value: Option<T>,
    /// The tick at which it fires.
    expiry: u64,
    /// Its index in its list; the next vacant entry while vacant.
    pos: u32,
    /// Which list holds it: `level * SLOTS + slot`, [`FIRING`], or [`UNLINKED`].
    slot: u16,
}

struct Level {
    /// Bit `s % 64` of word `s / 64`: slot `s` holds entries.
    occupied: [u64; WORDS],
}

impl Level {
    fn set(&mut self, slot: usize) {
        self.occupied[slot / 64] |= 1 << (slot % 64);
    }

    fn clear(&mut self, slot: usize) {
        self.occupied[slot / 64] &= !(1 << (slot % 64));
    }

    /// The first occupied slot at or after `pos`.
    fn first_from(&self, pos: usize) -> Option<usize> {
        let (mut word, bit) = (pos / 64, pos % 64);
        let mut bits = self.occupied[word] & (u64::MAX << bit);
        loop {
            if bits != 0 {
                return Some(word * 64 + bits.trailing_zeros() as usize);
            }
            word += 1;
            if word == WORDS {
                return None;
            }
            bits = self.occupied[word];
        }
    }

    fn is_empty(&self) -> bool {
        self.occupied.iter().all(|&w| w == 0)
    }
}

/// A timing wheel of `T`s (a worker's: the headers of parked tasks), by expiry tick.
pub(super) struct Wheel<T> {
    origin: Instant,
    /// The tick up to which the wheel has moved (invariant 2).
    elapsed: u64,
    levels: [Level; LEVELS],
    /// Each list's keys, in no order: one list per slot of every level, then [`FIRING`]'s.
    lists: Box<[Vec<u32>]>,
    /// Per slot: at most its smallest expiry (invariant 3); `u64::MAX` when empty.
    mins: Box<[u64]>,
    chunks: Vec<Box<[Entry<T>]>>,
    /// The first vacant entry, chained through `pos`.
    free: u32,
    /// Entries never used yet start here.
    fresh: u32,
    /// Entries holding a value that has not fired.
    armed: usize,
    /// At most the earliest expiry (invariant 5); `u64::MAX` when nothing was armed since the
    /// last look.
    hint: u64,
}

impl<T: Copy> Wheel<T> {
    /// An empty wheel whose tick 0 is `origin`.
    pub(super) fn new(origin: Instant) -> Wheel<T> {
        Wheel {
            origin,
            elapsed: 0,
            levels: std::array::from_fn(|_| Level {
                occupied: [0; WORDS],
            }),
            lists: (0..=LEVELS * SLOTS).map(|_| Vec::new()).collect(),
            mins: vec![u64::MAX; LEVELS * SLOTS].into_boxed_slice(),
            chunks: Vec::new(),
            free: NIL,
            fresh: 0,
            armed: 0,
            hint: u64::MAX,
        }
    }

    /// Timers waiting to fire.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.armed == 0
    }

    /// Nanoseconds from the origin to `at` (0 before it).
    #[inline]
    pub(super) fn nanos(&self, at: Instant) -> u64 {
        let d = at.saturating_duration_since(self.origin);
        d.as_secs()
            .saturating_mul(1_000_000_000)
            .saturating_add(d.subsec_nanos() as u64)
    }

    /// The tick that `now` lies in: what has expired by `now` is what expires at or before it.
    #[inline]
    pub(super) fn now_tick(&self, now: Instant) -> u64 {
        self.nanos(now) >> TICK_SHIFT
    }

    /// The first tick that starts at or after `nanos`: a timer due then fires no earlier.
    #[inline]
    pub(super) fn tick_at_or_after(nanos: u64) -> u64 {
        nanos.div_ceil(TICK_NS)
    }

    /// The instant at which `tick` starts.
    pub(super) fn instant_of(&self, tick: u64) -> Instant {
        self.at_nanos(tick.saturating_mul(TICK_NS))
    }

    /// The instant `nanos` after the origin.
    pub(super) fn at_nanos(&self, nanos: u64) -> Instant {
        self.origin
            .checked_add(std::time::Duration::from_nanos(nanos))
            .unwrap_or_else(|| self.origin + std::time::Duration::from_secs(86_400 * 365 * 30))
    }

    /// At most the earliest expiry (invariant 5); `u64::MAX` if none was looked for.
    #[inline]
    pub(super) fn hint(&self) -> u64 {
        self.hint
    }

    /// The tick the wheel has moved to: the most recent `poll`'s `now`.
    #[inline]
    pub(super) fn elapsed(&self) -> u64 {
        self.elapsed
    }

    #[inline]
    fn entry(&self, key: u32) -> &Entry<T> {
        &self.chunks[(key >> CHUNK_BITS) as usize][key as usize & (CHUNK - 1)]
    }

    #[inline]
    fn entry_mut(&mut self, key: u32) -> &mut Entry<T> {
        &mut self.chunks[(key >> CHUNK_BITS) as usize][key as usize & (CHUNK - 1)]
    }

    /// Adds `value`, to fire once the wheel reaches `expiry`; returns its key for `remove`
    /// (invariant 4). An expiry already passed fires at the next `poll`.
    pub(super) fn insert(&mut self, expiry: u64, value: T) -> u32 {
        let key = self.allocate();
        let entry = self.entry_mut(key);
        entry.value = Some(value);
        entry.expiry = expiry;
        self.armed += 1;
        self.link(key);
        self.hint = self.hint.min(expiry.min(SPAN_MASK).max(self.elapsed));
        key
    }

    /// Takes `key` out of the wheel and frees it; its value if it had not fired.
    pub(super) fn remove(&mut self, key: u32) -> Option<T> {
        if self.entry(key).slot != UNLINKED {
            self.unlink(key);
        }
        let free = self.free;
        let entry = self.entry_mut(key);
        let value = entry.value.take();
        entry.pos = free;
        self.free = key;
        if value.is_some() {
            self.armed -= 1;
        }
        value
    }

    /// The next value due by `now_tick`, unlinked (its entry stays allocated until
    /// `remove`, invariant 4), or `None` when nothing more is due; then the wheel stands at
    /// `now_tick` (invariant 2).
    pub(super) fn poll(&mut self, now_tick: u64) -> Option<T> {
        if now_tick < self.hint {
            // Nothing due (invariant 5): the common look of a busy or idle worker, answered
            // without a walk over the levels. `elapsed` stays behind; it moves at the next
            // poll that has something to do, or now if nothing is linked (invariant 2).
            if self.armed == 0 {
                self.elapsed = self.elapsed.max(now_tick);
            }
            return None;
        }
        loop {
            let firing = &mut self.lists[FIRING as usize];
            if let Some(key) = firing.pop() {
                if let Some(&ahead) = firing.len().checked_sub(AHEAD).map(|i| &firing[i]) {
                    self.prefetch(ahead);
                }
                let entry = self.entry_mut(key);
                entry.slot = UNLINKED;
                let value = entry.value.take();
                debug_assert!(value.is_some(), "a linked entry holds its value");
                self.armed -= 1;
                return value;
            }
            let Some((level, slot, start)) = self.next_slot() else {
                self.elapsed = self.elapsed.max(now_tick);
                self.hint = u64::MAX;
                return None;
            };
            if start > now_tick {
                self.elapsed = self.elapsed.max(now_tick);
                self.hint = self.mins[level * SLOTS + slot].max(start);
                return None;
            }
            let index = level * SLOTS + slot;
            let mut list = std::mem::take(&mut self.lists[index]);
            self.levels[level].clear(slot);
            self.mins[index] = u64::MAX;
            debug_assert!(
                start >= self.elapsed,
                "a slot behind the wheel (invariant 1)"
            );
            self.elapsed = start;
            if level == 0 {
                // Every entry of a level-0 slot expires at its tick: the list becomes the
                // firing one (empty until now), its entries at the same places.
                for (i, &key) in list.iter().enumerate() {
                    if let Some(&ahead) = list.get(i + AHEAD) {
                        self.prefetch(ahead);
                    }
                    self.entry_mut(key).slot = FIRING;
                }
                list = std::mem::replace(&mut self.lists[FIRING as usize], list);
            } else {
                // Down a level or more; what is due by `now_tick` straight to firing, sparing
                // it the levels between. The keys are in an array, so the entries' lines are
                // fetched ahead, not one miss after another (at a million timers nearly
                // every entry is a miss).
                for (i, &key) in list.iter().enumerate() {
                    if let Some(&ahead) = list.get(i + AHEAD) {
                        self.prefetch(ahead);
                    }
                    if self.entry(key).expiry <= now_tick {
                        self.push_firing(key);
                    } else {
                        self.link(key);
                    }
                }
                list.clear();
            }
            // Keep the emptied list's room for the slot's next timers, unless a burst made
            // it large (no timer is linked to it meanwhile: a level's entries move down).
            debug_assert!(self.lists[index].is_empty());
            if list.capacity() <= KEEP_CAPACITY {
                self.lists[index] = list;
            }
        }
    }

    /// The tick of the earliest expiry, at most (invariant 3): when the owner should look
    /// again.
    pub(super) fn next_expiry(&self) -> Option<u64> {
        if self.armed == 0 {
            return None;
        }
        if !self.lists[FIRING as usize].is_empty() {
            return Some(self.elapsed);
        }
        if self.hint != u64::MAX {
            return Some(self.hint);
        }
        let (level, slot, start) = self.next_slot()?;
        Some(self.mins[level * SLOTS + slot].max(start))
    }

    /// Calls `f` with the values expiring by `horizon`, looking at no more than `max`
    /// entries, from the earliest slots on: a hint for work ahead of time, and what it skips
    /// simply fires later as usual. With precise timers, the timers due within a horizon lie
    /// in many slots; with a slack, in one or two.
    pub(super) fn peek_due(&self, horizon: u64, max: usize, mut f: impl FnMut(T)) {
        let mut looked = 0;
        // False once `max` entries were looked at.
        let mut visit = |list: &[u32]| {
            for &key in list {
                if looked == max {
                    return false;
                }
                looked += 1;
                let entry = self.entry(key);
                if entry.expiry <= horizon {
                    if let Some(value) = entry.value {
                        f(value);
                    }
                }
            }
            true
        };
        if !visit(&self.lists[FIRING as usize]) {
            return;
        }
        for (level, l) in self.levels.iter().enumerate() {
            if l.is_empty() {
                continue;
            }
            let shift = SLOT_BITS * level as u32;
            let window = self.elapsed & !((1u64 << (shift + SLOT_BITS)) - 1);
            let mut pos = (self.elapsed >> shift) as usize & (SLOTS - 1);
            while let Some(slot) = l.first_from(pos) {
                // A level's slots all come before the occupied ones of the levels above.
                if window + ((slot as u64) << shift) > horizon {
                    return;
                }
                let index = level * SLOTS + slot;
                if self.mins[index] <= horizon && !visit(&self.lists[index]) {
                    return;
                }
                pos = slot + 1;
                if pos == SLOTS {
                    break;
                }
            }
        }
    }

    /// The earliest occupied slot: (level, slot, its first tick). The lowest level with one
    /// holds it: a level's entries all lie in the current slot of the level above.
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        for (level, l) in self.levels.iter().enumerate() {
            if l.is_empty() {
                continue;
            }
            let shift = SLOT_BITS * level as u32;
            let pos = (self.elapsed >> shift) as usize & (SLOTS - 1);
            let Some(slot) = l.first_from(pos) else {
                debug_assert!(false, "a slot behind the wheel (invariant 1)");
                continue;
            };
            let window = self.elapsed & !((1u64 << (shift + SLOT_BITS)) - 1);
            return Some((level, slot, window + ((slot as u64) << shift)));
        }
        None
    }

    /// Links `key` into the slot its expiry falls in, as seen from `elapsed`.
    fn link(&mut self, key: u32) {
        let expiry = self.entry(key).expiry;
        // Expired already: level 0's current slot. Beyond the span: its end.
        let at = expiry.min(SPAN_MASK).max(self.elapsed);
        let level = ((((self.elapsed ^ at) | (SLOTS as u64 - 1)).ilog2()) / SLOT_BITS) as usize;
        let slot = (at >> (SLOT_BITS * level as u32)) as usize & (SLOTS - 1);
        let index = level * SLOTS + slot;
        self.push(index, key);
        self.levels[level].set(slot);
        self.mins[index] = self.mins[index].min(at);
    }

    /// Links `key` into the list of entries being fired.
    fn push_firing(&mut self, key: u32) {
        self.push(FIRING as usize, key);
    }

    fn push(&mut self, index: usize, key: u32) {
        let list = &mut self.lists[index];
        let pos = list.len() as u32;
        list.push(key);
        let entry = self.entry_mut(key);
        entry.pos = pos;
        entry.slot = index as u16;
    }

    /// Takes `key` out of its list: the list's last key takes its place.
    fn unlink(&mut self, key: u32) {
        let Entry { pos, slot, .. } = *self.entry(key);
        let list = &mut self.lists[slot as usize];
        let last = list.pop().expect("a linked entry's list holds it");
        let emptied = list.is_empty();
        if last != key {
            list[pos as usize] = last;
            self.entry_mut(last).pos = pos;
        }
        if emptied && slot != FIRING {
            let (level, s) = (slot as usize / SLOTS, slot as usize % SLOTS);
            self.levels[level].clear(s);
            self.mins[slot as usize] = u64::MAX;
        }
        self.entry_mut(key).slot = UNLINKED;
    }

    /// Pulls the line of `key`'s entry into the cache: a hint, it never faults.
    #[inline]
    fn prefetch(&self, key: u32) {
        crate::stack::prefetch_line((self.entry(key) as *const Entry<T>).cast());
    }

    fn allocate(&mut self) -> u32 {
        if self.free != NIL {
            let key = self.free;
            self.free = self.entry(key).pos;
            return key;
        }
        let key = self.fresh;
        assert!(key != NIL, "weft: more than 2^32 - 1 timers on one worker");
        if key as usize == self.chunks.len() * CHUNK {
            self.chunks.push(
                (0..CHUNK)
                    .map(|_| Entry {
                        value: None,
                        expiry: 0,
                        pos: NIL,
                        slot: UNLINKED,
                    })
                    .collect(),
            );
        }
        self.fresh += 1;
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A xorshift sequence from `seed`.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// Polls everything due by `now`.
    fn fire(wheel: &mut Wheel<u32>, now: u64) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(v) = wheel.poll(now) {
            out.push(v);
        }
        out.sort();
        out
    }

    #[test]
    fn fires_at_expiry_not_before() {
        let mut w = Wheel::new(Instant::now());
        let a = w.insert(5, 1);
        let b = w.insert(70, 2);
        let c = w.insert(5000, 3);
        assert_eq!(w.next_expiry(), Some(5));
        assert_eq!(fire(&mut w, 4), Vec::<u32>::new());
        assert_eq!(fire(&mut w, 5), vec![1]);
        assert_eq!(w.next_expiry(), Some(70));
        assert_eq!(fire(&mut w, 69), Vec::<u32>::new());
        assert_eq!(fire(&mut w, 4999), vec![2]);
        assert_eq!(w.next_expiry(), Some(5000));
        assert_eq!(fire(&mut w, 6000), vec![3]);
        for k in [a, b, c] {
            assert_eq!(w.remove(k), None, "fired already");
        }
        assert!(w.is_empty());
        assert_eq!(w.next_expiry(), None);
    }

    #[test]
    fn removed_timers_do_not_fire() {
        let mut w = Wheel::new(Instant::now());
        let keys: Vec<u32> = (0..1000).map(|i| w.insert(i * 37 + 1, i as u32)).collect();
        for (i, &k) in keys.iter().enumerate() {
            if i % 3 == 0 {
                assert_eq!(w.remove(k), Some(i as u32));
            }
        }
        let fired = fire(&mut w, 1_000_000);
        let expected: Vec<u32> = (0..1000).filter(|i| i % 3 != 0).collect();
        assert_eq!(fired, expected);
        for (i, &k) in keys.iter().enumerate() {
            if i % 3 != 0 {
                assert_eq!(w.remove(k), None);
            }
        }
        assert!(w.is_empty());
    }

    #[test]
    fn expired_and_far_expiries() {
        let mut w = Wheel::new(Instant::now());
        fire(&mut w, 1000);
        w.insert(10, 1); // already passed: fires at the next poll
        assert_eq!(w.next_expiry(), Some(1000));
        assert_eq!(fire(&mut w, 1000), vec![1]);
        let far = w.insert(SPAN_MASK + 12_345, 2);
        let last = w.insert(SPAN_MASK - 1, 3);
        assert_eq!(fire(&mut w, SPAN_MASK - 2), Vec::<u32>::new());
        assert_eq!(fire(&mut w, SPAN_MASK - 1), vec![3]);
        assert_eq!(fire(&mut w, SPAN_MASK), vec![2], "the end of the span");
        w.remove(far);
        w.remove(last);
    }

    /// Random inserts, removes and polls against a sorted list: each value fires at the
    /// first poll whose `now` reaches its expiry, and the next expiry is never late.
    #[test]
    fn matches_a_sorted_model() {
        let mut w = Wheel::new(Instant::now());
        let mut model: Vec<(u64, u32, u32)> = Vec::new(); // (expiry, value, key)
        let mut rand = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let mut now = 0u64;
        let mut value = 0;
        for _ in 0..200_000 {
            match rand() % 10 {
                0..=4 => {
                    let spread = [10, 300, 70_000, 5_000_000, 1 << 40][(rand() % 5) as usize];
                    let expiry = now + rand() % spread;
                    value += 1;
                    let key = w.insert(expiry, value);
                    model.push((expiry, value, key));
                }
                5 | 6 if !model.is_empty() => {
                    let (_, v, key) = model.swap_remove((rand() % model.len() as u64) as usize);
                    assert_eq!(w.remove(key), Some(v));
                }
                _ => {
                    if let Some(next) = w.next_expiry() {
                        let earliest = model.iter().map(|m| m.0).min().unwrap();
                        assert!(next <= earliest.max(now), "next expiry late");
                    }
                    now += [1, 50, 3000, 400_000][(rand() % 4) as usize];
                    let fired = fire(&mut w, now);
                    let mut due: Vec<u32> = Vec::new();
                    model.retain(|&(e, v, key)| {
                        if e <= now {
                            due.push(v);
                            assert_eq!(w.remove(key), None);
                            false
                        } else {
                            true
                        }
                    });
                    due.sort();
                    assert_eq!(fired, due);
                }
            }
        }
    }

    /// `peek_due` sees the timers due by its horizon across slots and levels, no others,
    /// and no more entries than asked.
    #[test]
    fn peek_due_looks_across_slots() {
        let mut w = Wheel::new(Instant::now());
        for (i, e) in [3u64, 40, 300, 900, 70_000].into_iter().enumerate() {
            w.insert(e, i as u32);
        }
        let peek = |w: &Wheel<u32>, horizon, max| {
            let mut seen = Vec::new();
            w.peek_due(horizon, max, |v| seen.push(v));
            seen.sort();
            seen
        };
        assert_eq!(peek(&w, 1000, 64), vec![0, 1, 2, 3]);
        assert_eq!(peek(&w, 299, 64), vec![0, 1]);
        assert_eq!(peek(&w, 1000, 2).len(), 2);
        assert_eq!(peek(&w, 100_000, 64), vec![0, 1, 2, 3, 4]);
        assert_eq!(fire(&mut w, 40), vec![0, 1]);
        assert_eq!(peek(&w, 1000, 64), vec![2, 3]);
    }

    /// A million timers on one wheel: half cancelled in random order, the rest fire, each
    /// once and not before its expiry.
    #[test]
    fn a_million_timers() {
        const N: u32 = 1_000_000;
        let mut w = Wheel::new(Instant::now());
        let mut rand = xorshift(0x1234_5678_9abc_def1u64);
        let expiries: Vec<u64> = (0..N).map(|_| 1 + rand() % 5_000_000).collect();
        let keys: Vec<u32> = (0..N).map(|i| w.insert(expiries[i as usize], i)).collect();
        let mut order: Vec<u32> = (0..N).collect();
        for i in (1..N as usize).rev() {
            order.swap(i, (rand() % (i as u64 + 1)) as usize);
        }
        for &i in &order[..N as usize / 2] {
            assert_eq!(w.remove(keys[i as usize]), Some(i));
        }
        let mut fired = vec![false; N as usize];
        let mut count = 0;
        let mut now = 0;
        while !w.is_empty() {
            now += 1 + rand() % 3000;
            while let Some(i) = w.poll(now) {
                assert!(expiries[i as usize] <= now, "fired early");
                assert!(!fired[i as usize], "fired twice");
                fired[i as usize] = true;
                count += 1;
            }
            if let Some(next) = w.next_expiry() {
                assert!(next > now, "the next expiry is after what fired");
            }
        }
        assert_eq!(count, N / 2);
        for &i in &order[..N as usize / 2] {
            assert!(!fired[i as usize], "a cancelled timer fired");
        }
    }

    /// Not a test: the cost per timer of the wheel against the ordered map weft used before
    /// it, at a million timers due over 4 s (insert all, then cancel all in random order;
    /// insert all again, then fire all). Prints ns per operation; run with
    /// `cargo test --release -p weft --lib wheel_against_the_map -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn wheel_against_the_map() {
        use std::collections::BTreeMap;
        const N: usize = 1_000_000;
        let mut rand = xorshift(0x2545_f491_4f6c_dd1du64);
        // Ticks of 1,024 ns: 1 to 5 s ahead.
        let expiries: Vec<u64> = (0..N).map(|_| 1_000_000 + rand() % 4_000_000).collect();
        let mut order: Vec<usize> = (0..N).collect();
        for i in (1..N).rev() {
            order.swap(i, (rand() % (i as u64 + 1)) as usize);
        }
        let per = |start: std::time::Instant| start.elapsed().as_nanos() as f64 / N as f64;
        for round in 0..3 {
            let mut wheel: Wheel<u32> = Wheel::new(Instant::now());
            let t = Instant::now();
            let keys: Vec<u32> = expiries
                .iter()
                .enumerate()
                .map(|(i, &e)| wheel.insert(e, i as u32))
                .collect();
            let w_insert = per(t);
            let t = Instant::now();
            for &i in &order {
                wheel.remove(keys[i]);
            }
            let w_cancel = per(t);
            let keys: Vec<u32> = expiries
                .iter()
                .enumerate()
                .map(|(i, &e)| wheel.insert(e, i as u32))
                .collect();
            let t = Instant::now();
            let mut fired = 0;
            for now in (0..=5_001_000u64).step_by(977) {
                while wheel.poll(now).is_some() {
                    fired += 1;
                }
            }
            for k in keys {
                wheel.remove(k);
            }
            let w_fire = per(t);
            assert_eq!(fired, N);

            let mut map: BTreeMap<(u64, u64), u32> = BTreeMap::new();
            let t = Instant::now();
            for (i, &e) in expiries.iter().enumerate() {
                map.insert((e, i as u64), i as u32);
            }
            let m_insert = per(t);
            let t = Instant::now();
            for &i in &order {
                map.remove(&(expiries[i], i as u64));
            }
            let m_cancel = per(t);
            for (i, &e) in expiries.iter().enumerate() {
                map.insert((e, i as u64), i as u32);
            }
            let t = Instant::now();
            while map.pop_first().is_some() {}
            let m_fire = per(t);
            println!(
                "round {round}: ns per timer at 1M: insert wheel {w_insert:.0} map {m_insert:.0}; \
                 cancel wheel {w_cancel:.0} map {m_cancel:.0}; fire (with the entry's removal) \
                 wheel {w_fire:.0} map {m_fire:.0}"
            );
        }
    }
}
