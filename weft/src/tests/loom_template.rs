//! stack/write_once.rs, the table of stack-image templates (stack/template.rs): of two threads
//! that race to make the template of one entry exactly one wins and both then use the
//! winner's; a reader — a restore, the fault thread — that finds the entry set sees every byte
//! its maker wrote before publishing it, with no lock and no reference count.

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use crate::write_once::WriteOnce;

/// A template: its maker writes it before publishing; loom tracks the accesses.
struct Template {
    maker: usize,
    words: UnsafeCell<[u64; 2]>,
}

// SAFETY: `words` is written only before the template is published, read only after.
unsafe impl Sync for Template {}

fn make(maker: usize) -> Box<Template> {
    let template = Box::new(Template {
        maker,
        words: UnsafeCell::new([0; 2]),
    });
    template
        .words
        .with_mut(|w| unsafe { *w = [maker as u64, 10 + maker as u64] });
    template
}

fn words(template: &Template) -> [u64; 2] {
    template.words.with(|w| unsafe { *w })
}

#[test]
fn loom_template_made_once_and_read_whole() {
    loom::model(|| {
        let table = Arc::new(WriteOnce::<Template>::new(2));
        let makers: Vec<_> = (1..=2)
            .map(|maker| {
                let table = table.clone();
                thread::spawn(move || match table.publish(1, make(maker)) {
                    Ok(t) => (true, t.maker, words(t)),
                    Err((mine, t)) => {
                        assert_eq!(mine.maker, maker, "a loser gets its own back");
                        (false, t.maker, words(t))
                    }
                })
            })
            .collect();
        // A restore reading the entry at any time: empty, or a whole template.
        if let Some(t) = table.get(1) {
            assert_eq!(words(t), [t.maker as u64, 10 + t.maker as u64]);
        }
        assert!(table.get(0).is_none());
        let results: Vec<_> = makers.into_iter().map(|m| m.join().unwrap()).collect();
        assert_eq!(results.iter().filter(|r| r.0).count(), 1, "one maker wins");
        let winner = table.get(1).expect("published").maker;
        for (_, maker, words) in results {
            assert_eq!(maker, winner, "both use the winner's template");
            assert_eq!(words, [winner as u64, 10 + winner as u64]);
        }
    });
}
