//! Images of compacted stacks stored as a difference from a *template*: the image of another
//! task parked at the same place.
//!
//! Owns: the process's templates (a write-once table, `write_once.rs`), the encoded image's
//! format, and its encoding and expansion. `compact.rs` encodes an image once it has published
//! the plain one (and swaps the two under the slot's lock); `restore.rs` expands one where it
//! would have copied the plain bytes.
//!
//! Tasks parked at one site hold nearly the same stack: the same frames, return addresses,
//! saved registers and the same values of most locals. What differs is mostly their own
//! pointers (a task's cell, its neighbours in a wait list) and, above all, every pointer into
//! their own stack (frame pointers, a waiter's address, a local's), which differs only by the
//! slot's base. So a template's words are stored *normalised*: a word that pointed into the
//! template's own slot is kept as its offset from the slot's base, and marked. An image is
//! then a bitmap of the words where it differs from the template — a marked word compared
//! after adding this slot's base — and those words. Most of the differing words of an idle
//! task point into its own task cell, each at the same distance from the template's word
//! (the two cells' distance), and, on another worker than the template's task, into that
//! worker (the two workers' distance): up to two such distances (*shifts*) are stored once,
//! and two bits per differing word (for the first 16) say which words are the template's
//! plus one of them:
//!
//! ```text
//!   plain image:    [header][live bytes (len)                                      ]
//!   encoded image:  [header][template | len | codes][differs: len/8 bits][shifts][words]
//!   expansion:      word i = differs[i] ? (codes[k] = c > 0 ? template(i) + shift[c]
//!                                                           : next word)
//!                          : template(i)          (k: how many differing words before i)
//!                   template(i) = relative[i] ? template[i] + slot base : template[i]
//! ```
//!
//! Measured on `examples/million` (a million tasks parked on one gate): the plain image is
//! 488 B with its header, the encoded one 48–64 B (see `compact.rs`, "What an idle task's
//! bytes are").
//!
//! Correct for any template: the encoding records every word that differs, so a poor template
//! only makes an image larger (it stays plain when the encoding would not be smaller). Which
//! templates exist decides only how much is saved. A template is the first image of a
//! (slot size, live length) that found no close template (one word in 16 differing, see
//! [`encode`]) among the ones already made for that key, up to [`WAYS`] per key; it is never freed or
//! changed, so the fault thread and every restore read it with one Acquire load and no lock,
//! and no reference count is kept (a freed template would have to wait for the last image that
//! names it). Their memory is bounded ([`TEMPLATE_BYTES_MAX`]) and counted in
//! `weft::metrics` (`stack_template_bytes`); a process that parks at more distinct places than
//! the table holds keeps the plain images of the rest.
//!
//! Only images of at most [`TEMPLATE_LEN_MAX`] bytes are encoded. A restore fills a slot in
//! one piece (restore.rs, "One piece"), so it expands one straight into the buffer it fills
//! the slot's top pages from.
//!
//! May call: `write_once.rs`, `mode.rs` (counters). Called by: `compact.rs`, `restore.rs`.
//!
//! Why by hand: a general compressor (LZ4 and the like) finds neither the slot-relative words
//! nor the repetition across images, and costs more per restore than the expansion here (a
//! pass over ≈60 words).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::LazyLock;

use super::mode::{add, TEMPLATES, TEMPLATE_BYTES};
use super::write_once::WriteOnce;

/// The most live bytes an encoded image covers (the idle task's image is ≈480 B; under
/// AddressSanitizer, whose frames carry redzones, ≈8 KiB). Longer ones stay plain: a
/// template of one takes twice its length, and its staging (compact.rs) a worker's buffer.
pub(super) const TEMPLATE_LEN_MAX: usize = 16 << 10;
/// Keys (slot size, live length) hash into this many buckets of [`WAYS`] templates.
const BUCKETS: usize = 1024;
/// Templates per bucket: tasks parked at different sites may share a live length.
const WAYS: usize = 4;
/// Bytes all templates may take together (a template of the longest image takes 8 KiB, of
/// an idle task ≈1 KiB).
const TEMPLATE_BYTES_MAX: u64 = 4 << 20;
/// Differing words an encoded image can code as the template's plus one of its shifts: the
/// first 16 (two bits each in the head word's top half: 0 a word of its own, 1 or 2 a shift).
const SHIFTED_MAX: usize = 16;
/// Distances an encoded image stores once: an idle task's pointers into its own cell share
/// one, its pointers into its worker another (for a task on another worker than its
/// template's).
const SHIFTS: usize = 2;
const _: () = assert!(BUCKETS * WAYS <= 1 << 16 && TEMPLATE_LEN_MAX < 1 << 16);

/// A template: an image's words, normalised against its slot's base.
struct Template {
    /// The size of the slots its images come from.
    slot_size: usize,
    /// The words; a word marked in `relative` holds an offset from its slot's base.
    words: Box<[u64]>,
    /// A mask per word: all ones where the word pointed into its slot, else zero (a whole
    /// word rather than a bit: comparing is branch-free, and the expansion's first loop one
    /// the compiler vectorises).
    relative: Box<[u64]>,
}

impl Template {
    fn new(raw: &[u64], slot: usize, slot_size: usize) -> Template {
        let mut relative = vec![0u64; raw.len()].into_boxed_slice();
        let words = raw
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let offset = (w as usize).wrapping_sub(slot);
                if offset < slot_size {
                    relative[i] = u64::MAX;
                    offset as u64
                } else {
                    w
                }
            })
            .collect();
        Template {
            slot_size,
            words,
            relative,
        }
    }

    fn bytes(&self) -> u64 {
        (std::mem::size_of::<Template>() + (self.words.len() + self.relative.len()) * 8) as u64
    }
}

/// Every template; never cleared (see the module doc).
static TABLE: LazyLock<WriteOnce<Template>> = LazyLock::new(|| WriteOnce::new(BUCKETS * WAYS));

fn bucket(slot_size: usize, words: usize) -> usize {
    let key = (words as u64) << 8 | u64::from(slot_size.trailing_zeros());
    // Fibonacci hashing: consecutive lengths spread over the buckets.
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % BUCKETS
}

/// Encodes `raw`, the live words of the slot `[slot, slot + slot_size)` (its top `raw.len()`
/// words), into `out` as a difference from a template, making the template if none is close.
/// False where the image stays plain: too long, no template to be had, or no saving.
///
/// The first template of its key whose encoding is *close* ([`close_len`]) is taken; where
/// none is, a template is made from this image in the next free way, or, with every way
/// taken, the smallest encoding is kept, and its way and length are remembered for the
/// bucket ([`HINTS`]): later images try that way first and take it when they encode no
/// larger. Taking merely the first template that saved anything let one odd first image (a
/// task whose dead stack words held other values) cost every later image of its site 6 words
/// more: 100 B a task instead of 60 in 1 of 3 runs of `examples/million`. A way costs a pass
/// over the image (≈60 words for an idle task); the hint keeps a site whose images are all a
/// few words apart from paying four (`weft-bench probe`'s million took 0.7 s longer to park
/// without it).
pub(super) fn encode(raw: &[u64], slot: usize, slot_size: usize, out: &mut Vec<u64>) -> bool {
    let words = raw.len();
    if words == 0 || words * 8 > TEMPLATE_LEN_MAX {
        return false;
    }
    let bucket = bucket(slot_size, words);
    let first = bucket * WAYS;
    let of_key = |t: &&Template| t.slot_size == slot_size && t.words.len() == words;
    let against = |template: &Template, index: usize, out: &mut Vec<u64>| {
        encode_against(template, index, raw, slot, out, words / 2)
    };
    // Relaxed: a hint only orders the search; any value is a correct one.
    let hint = HINTS[bucket].load(Ordering::Relaxed);
    let hinted = (hint & 0xff) as usize;
    if hinted != 0 {
        let index = first + hinted - 1;
        if TABLE.get(index).filter(of_key).is_some_and(|t| {
            against(t, index, out) && out.len() <= close_len(words).max(hint as usize >> 8)
        }) {
            return true;
        }
    }
    // The smallest encoding found that is not close: (its length, its way).
    let mut best: Option<(usize, usize)> = None;
    for index in first..first + WAYS {
        let Some(template) = TABLE.get(index) else {
            // Ways fill in order: none after an empty one. Its own template matches the
            // image whole; one another thread made there first, as it does.
            if made(index, raw, slot, slot_size).is_some_and(|t| against(t, index, out)) {
                return true;
            }
            break;
        };
        if of_key(&template) && against(template, index, out) {
            if out.len() <= close_len(words) {
                return true;
            }
            if best.is_none_or(|(len, _)| out.len() < len) {
                best = Some((out.len(), index));
            }
        }
    }
    // No close template and no way to make one: the smallest encoding, made again (`out`
    // holds the last one tried).
    best.is_some_and(|(len, index)| {
        let hint = (index - first + 1) as u32 | (len.min(1 << 23) as u32) << 8;
        HINTS[bucket].store(hint, Ordering::Relaxed);
        TABLE.get(index).is_some_and(|t| against(t, index, out))
    })
}

/// Per bucket, the way whose encoding the last search found smallest among templates none of
/// which was close, and that encoding's length in words: `way + 1 | len << 8`; 0 for none.
static HINTS: [AtomicU32; BUCKETS] = [const { AtomicU32::new(0) }; BUCKETS];

/// The longest encoding (in words, head included) of an image of `words` words that counts
/// as close to its template: its head, bitmap and a shift, and one differing word in 16. An
/// idle task's is 5 words against a template made on its worker, 6 against one made on
/// another (the second shift: its pointers into its worker).
fn close_len(words: usize) -> usize {
    2 + words.div_ceil(64) + words / 16
}

/// Encodes `raw` into `out` against `template` (at `index` of the table), in one pass: false
/// where more than `limit` words differ or the encoding would be no smaller.
fn encode_against(
    template: &Template,
    index: usize,
    raw: &[u64],
    slot: usize,
    out: &mut Vec<u64>,
    limit: usize,
) -> bool {
    let words = raw.len();
    let bitmap = words.div_ceil(64);
    // The head, the bitmap, (the shifts, placed last), then the differing words.
    let at = 1 + bitmap;
    out.clear();
    out.reserve(at + words);
    out.push(index as u64 | (words as u64 * 8) << 16);
    out.resize(at, 0);
    // How far each of the first differing words is from the template's.
    let mut deltas = [0u64; SHIFTED_MAX];
    let mut n = 0;
    for (i, ((&w, &t), &r)) in raw
        .iter()
        .zip(template.words.iter())
        .zip(template.relative.iter())
        .enumerate()
    {
        let t = t.wrapping_add(slot as u64 & r);
        if w != t {
            if n == limit {
                return false;
            }
            if n < SHIFTED_MAX {
                deltas[n] = w.wrapping_sub(t);
            }
            n += 1;
            out[1 + i / 64] |= 1 << (i % 64);
            out.push(w);
        }
    }
    // The shifts: the distances the most of the first differing words share, each worth its
    // word where two or more share it; those words are then left out and coded instead.
    let deltas = &deltas[..n.min(SHIFTED_MAX)];
    let shifts = common_deltas(deltas);
    let mut kept = at;
    for k in 0..n {
        let w = out[at + k];
        match shifts
            .iter()
            .position(|&s| k < SHIFTED_MAX && Some(deltas[k]) == s)
        {
            Some(code) => out[0] |= (code as u64 + 1) << (32 + 2 * k),
            None => {
                out[kept] = w;
                kept += 1;
            }
        }
    }
    out.truncate(kept);
    out.splice(at..at, shifts.iter().flatten().copied());
    if out.len() >= words {
        return false;
    }
    #[cfg(debug_assertions)]
    {
        let mut back = vec![0u64; words];
        // SAFETY: `out` is an encoding made above; `back` holds `words` words.
        unsafe {
            expand(
                out.as_ptr() as *const u8,
                slot,
                back.as_mut_ptr() as *mut u8,
            )
        };
        assert_eq!(back, raw, "a stack image's encoding expands to other bytes");
    }
    true
}

/// The two deltas shared by the most of `deltas` (by two or more each), most shared first.
fn common_deltas(deltas: &[u64]) -> [Option<u64>; SHIFTS] {
    let mut shifts = [None; SHIFTS];
    for i in 0..SHIFTS {
        let taken = &shifts[..i];
        shifts[i] = deltas
            .iter()
            .filter(|&&d| !taken.contains(&Some(d)))
            .map(|&d| (d, deltas.iter().filter(|&&e| e == d).count()))
            .filter(|&(_, count)| count >= 2)
            .max_by_key(|&(_, count)| count)
            .map(|(d, _)| d);
    }
    shifts
}

/// Makes the template at `index` from `raw`, within the budget; the one another thread made
/// there first if it lost the race and that one fits.
fn made(index: usize, raw: &[u64], slot: usize, slot_size: usize) -> Option<&'static Template> {
    let template = Box::new(Template::new(raw, slot, slot_size));
    let bytes = template.bytes();
    if TEMPLATE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes > TEMPLATE_BYTES_MAX {
        TEMPLATE_BYTES.fetch_sub(bytes, Ordering::Relaxed);
        return None;
    }
    match TABLE.publish(index, template) {
        Ok(template) => {
            add(&TEMPLATES, 1);
            Some(template)
        }
        Err((_, other)) => {
            TEMPLATE_BYTES.fetch_sub(bytes, Ordering::Relaxed);
            (other.slot_size == slot_size && other.words.len() == raw.len()).then_some(other)
        }
    }
}

/// The live bytes an encoded image expands to.
///
/// # Safety
/// `payload` is an encoded image's contents, as [`encode`] wrote them.
pub(super) unsafe fn live_len(payload: *const u8) -> usize {
    // SAFETY: the caller's contract; the first word.
    unsafe { ((payload as *const u64).read() >> 16 & 0xffff) as usize }
}

/// Writes the live bytes of the encoded image `payload` of the slot at `slot` to `dst`
/// ([`live_len`] bytes): the template's words, then the differing ones over them.
///
/// # Safety
/// `payload` is an encoded image's contents, as [`encode`] wrote them for this slot, and
/// `dst` is valid for [`live_len`] bytes, 8-aligned, which overlap nothing of the image.
pub(super) unsafe fn expand(payload: *const u8, slot: usize, dst: *mut u8) {
    let payload = payload as *const u64;
    // SAFETY: the caller's contract: the words `encode` wrote, in their order.
    unsafe {
        let head = payload.read();
        let words = (head >> 16 & 0xffff) as usize / 8;
        let template = TABLE
            .get((head & 0xffff) as usize)
            .expect("an encoded stack image names a template");
        debug_assert_eq!(template.words.len(), words);
        let bitmap = std::slice::from_raw_parts(payload.add(1), words.div_ceil(64));
        let mut differing = payload.add(1 + bitmap.len());
        let mut codes = head >> 32;
        // Code 2 used: both shifts are stored; else code 1: the first; else none.
        let stored = if codes & 0xaaaa_aaaa != 0 {
            2
        } else {
            usize::from(codes != 0)
        };
        let mut shifts = [0u64; SHIFTS];
        for shift in &mut shifts[..stored] {
            *shift = differing.read();
            differing = differing.add(1);
        }
        debug_assert_eq!(dst as usize % 8, 0);
        let dst = std::slice::from_raw_parts_mut(dst as *mut u64, words);
        for ((d, &t), &r) in dst.iter_mut().zip(&template.words).zip(&template.relative) {
            *d = t.wrapping_add(slot as u64 & r);
        }
        for (piece, &bits) in bitmap.iter().enumerate() {
            let mut bits = bits;
            while bits != 0 {
                let d = &mut dst[piece * 64 + bits.trailing_zeros() as usize];
                bits &= bits - 1;
                *d = match codes & 3 {
                    0 => {
                        let w = differing.read();
                        differing = differing.add(1);
                        w
                    }
                    code => d.wrapping_add(shifts[code as usize - 1]),
                };
                codes >>= 2;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Test slot sizes of their own: the table is the process's, shared by concurrent tests.
    const SIZE: usize = 1 << 23;

    fn xorshift(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    fn round_trip(raw: &[u64], slot: usize, size: usize) -> Option<usize> {
        let mut out = Vec::new();
        if !encode(raw, slot, size, &mut out) {
            return None;
        }
        let payload = out.as_ptr() as *const u8;
        let mut back = vec![0u64; raw.len()];
        // SAFETY: `out` is what `encode` wrote; `back` holds the live length.
        unsafe {
            assert_eq!(live_len(payload), raw.len() * 8);
            expand(payload, slot, back.as_mut_ptr() as *mut u8);
        }
        assert_eq!(back, raw, "an encoded image expanded to other bytes");
        Some(out.len() * 8)
    }

    /// An image "parked at one site" in the slot at `slot`: shared words, pointers into its
    /// own slot, pointers into its own cell (at a distance from the template's that they
    /// share), pointers into its worker (one of two), and a few words of its own.
    fn image(words: usize, slot: usize, own: u64, size: usize) -> Vec<u64> {
        let cell = 0x7000_0000_0000 + own * 0x100;
        let worker = 0x7100_0000_0000 + (own % 2) * 0x20_0000;
        (0..words)
            .map(|i| match i % 8 {
                0 | 3 => (slot + size - 64 - i * 8) as u64, // a frame pointer, a local's address
                5 if i % 32 == 5 => own.wrapping_mul(i as u64 + 1), // the task's own values
                6 if i % 16 == 6 => cell + i as u64 * 8,    // into its cell
                7 if i % 16 == 15 => worker + i as u64 * 8, // into its worker
                _ => 0x5555_0000_0000 + i as u64,           // return addresses, shared values
            })
            .collect()
    }

    #[test]
    fn images_of_one_site_expand_to_their_bytes_and_shrink() {
        let size = SIZE;
        let first = round_trip(&image(60, 7 * size, 1, size), 7 * size, size);
        assert!(first.is_some(), "the first image makes the template");
        for k in 2..50u64 {
            let slot = (k as usize * 13 + 100) * size;
            let bytes = round_trip(&image(60, slot, k, size), slot, size).expect("encoded");
            // A head word, a bitmap word, the cell's shift, 2 own words (the 4 cell words are
            // shifted); on the other worker than the template's image, its shift too (the 3
            // worker words are shifted).
            let worker_shift = usize::from(k % 2 == 0);
            assert_eq!(bytes, (5 + worker_shift) * 8, "image {k}");
        }
    }

    /// A site's first image is odd (dead words that held other values): the images after it
    /// are not left to differ from it in those words; one of them makes a template of its own.
    #[test]
    fn an_odd_first_image_does_not_cost_the_rest() {
        let size = SIZE << 4;
        let mut odd = image(60, 3 * size, 1, size);
        for i in [33, 34, 35, 36, 44, 45, 46] {
            odd[i] = 0x7fff_ffff_ffff_ffff - i as u64;
        }
        assert_eq!(round_trip(&odd, 3 * size, size), Some(16), "against itself");
        let sizes: Vec<usize> = (2..40u64)
            .map(|k| {
                let slot = (k as usize * 7 + 50) * size;
                round_trip(&image(60, slot, k, size), slot, size).expect("encoded") / 8
            })
            .collect();
        // Image 2 made the second way's template; the rest encode against it.
        assert_eq!(sizes[0], 2);
        assert!(sizes[1..].iter().all(|&words| words <= 6), "{sizes:?}");
    }

    /// A site whose images are all a few words apart (none close to another): the first
    /// [`WAYS`] make templates, the rest take their smallest encoding (then the hinted way).
    #[test]
    fn images_close_to_no_template_take_the_smallest_encoding() {
        let size = SIZE << 5;
        let sizes: Vec<usize> = (1..30u64)
            .map(|k| {
                let slot = (k as usize * 5 + 9) * size;
                let mut raw = image(60, slot, k, size);
                for i in (1..60).step_by(8) {
                    raw[i] = xorshift(&mut (k << 8 | i as u64)); // its own
                }
                round_trip(&raw, slot, size).expect("encoded") / 8
            })
            .collect();
        assert!(sizes[..WAYS].iter().all(|&words| words == 2), "{sizes:?}");
        // Head, bitmap, the cell's and the worker's shifts, 2 + 8 words of its own.
        assert!(sizes[WAYS..].iter().all(|&words| words <= 14), "{sizes:?}");
    }

    #[test]
    fn random_images_round_trip_or_stay_plain() {
        let mut seed = 0x1234_5678_9abc_def1u64;
        let size = SIZE << 1;
        for round in 0..2000 {
            let words = 2 + (xorshift(&mut seed) % 300) as usize;
            let slot = (1 + xorshift(&mut seed) % 1000) as usize * size;
            let base = image(words, slot, round, size);
            let mut raw = base.clone();
            // Up to a third of the words changed at random, some to pointers into the slot.
            for _ in 0..xorshift(&mut seed) as usize % (words / 3 + 1) {
                let i = xorshift(&mut seed) as usize % words;
                raw[i] = match xorshift(&mut seed) % 3 {
                    0 => (slot + xorshift(&mut seed) as usize % size) as u64,
                    1 => xorshift(&mut seed),
                    _ => 0,
                };
            }
            if let Some(bytes) = round_trip(&raw, slot, size) {
                assert!(bytes < words * 8, "an encoding no smaller than the image");
            }
        }
    }

    #[test]
    fn unlike_images_stay_plain_or_get_a_way_of_their_own() {
        let size = SIZE << 2;
        let mut seed = 0xfeed_u64;
        let mut encoded = 0;
        for k in 0..40 {
            let slot = (k + 1) * size;
            let raw: Vec<u64> = (0..64).map(|_| xorshift(&mut seed)).collect();
            encoded += usize::from(round_trip(&raw, slot, size).is_some());
        }
        // Each random image is far from every template: the first WAYS make templates
        // (encoded against themselves), the rest stay plain. (Fewer where another test's
        // key shares the bucket and took ways first.)
        let shared = (2..302).any(|w| bucket(SIZE << 1, w) == bucket(size, 64))
            || bucket(SIZE, 60) == bucket(size, 64);
        if shared {
            assert!(encoded <= WAYS);
        } else {
            assert_eq!(encoded, WAYS);
        }
    }

    #[test]
    fn long_images_stay_plain() {
        let size = SIZE << 3;
        let raw = image(TEMPLATE_LEN_MAX / 8 + 2, size, 1, size);
        assert!(!encode(&raw, size, size, &mut Vec::new()));
    }
}
