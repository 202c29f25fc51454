//! A request's prompt ([`Prompt`]): either its own short list of segments,
//! or a view of a session's shared, append-only [`SegmentLog`].
//!
//! Round k+1 of an accumulating session repeats round k's prompt and output
//! before its new tokens. Copying that context into every round makes a
//! session of N rounds hold O(N²) segments when many of its rounds are in
//! flight at once (a replayed trace injects them at their recorded times).
//! Instead the session appends each round's segments to one log, and each
//! round's prompt is the log's first `end` segments: the rounds share one
//! storage and memory is linear in the session's context.
//!
//! The log is written once per slot, past the end of every view, and never
//! rewritten; when full it moves to a buffer twice as large (old views keep
//! the old buffer alive until they are dropped), so appending is amortised
//! O(1) and a view costs one reference count. Readers see a plain
//! `&[Segment]` ([`Prompt`] dereferences to it): every consumer (block
//! hashing, the trace export, observe) reads the same segments as before.

use std::cell::UnsafeCell;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::request::Segment;

/// Storage of a [`SegmentLog`]. Slot `i` is written once, by the log that
/// owns the buffer, before any view covering `i` exists, and never again.
struct LogBuf {
    slots: Box<[UnsafeCell<Segment>]>,
}

// SAFETY: the only writes are in `SegmentLog::push`, by the single log that
// owns the buffer (a `SegmentLog` is not `Clone`, and a view never writes),
// to the slot at the log's length. Every view (and every slice handed out)
// covers only slots below the length at the time it was made, and the length
// never decreases, so no slot is ever written while it can be read: shared
// access from several threads reads only slots that no one writes.
unsafe impl Sync for LogBuf {}

impl LogBuf {
    fn with_capacity(n: usize) -> Arc<LogBuf> {
        Arc::new(LogBuf {
            slots: (0..n)
                .map(|_| UnsafeCell::new(Segment { seed: 0, len: 0 }))
                .collect(),
        })
    }

    /// The first `end` slots, which the caller guarantees are written (at
    /// most the owning log's length when the caller's view was made).
    #[inline]
    fn prefix(&self, end: usize) -> &[Segment] {
        let s = &self.slots[..end];
        // SAFETY: `UnsafeCell<Segment>` has the layout of `Segment`; these
        // slots were written before the view existed and are never written
        // again (see the `Sync` impl), so a shared slice of them is valid for
        // as long as `self` is borrowed.
        unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<Segment>(), s.len()) }
    }
}

/// The growing context of one session: an append-only list of segments
/// whose prefixes are handed out as prompts ([`SegmentLog::view`]) sharing
/// its storage.
pub struct SegmentLog {
    buf: Arc<LogBuf>,
    len: usize,
}

impl SegmentLog {
    /// A log holding `segments`.
    pub fn from_slice(segments: &[Segment]) -> SegmentLog {
        let mut log = SegmentLog {
            buf: LogBuf::with_capacity(segments.len().max(4)),
            len: 0,
        };
        for &s in segments {
            log.push(s);
        }
        log
    }

    /// Append a segment (amortised O(1); views already handed out are unchanged).
    pub fn push(&mut self, s: Segment) {
        if self.len == self.buf.slots.len() {
            let bigger = LogBuf::with_capacity((self.len * 2).max(4));
            for (dst, &src) in bigger.slots.iter().zip(self.buf.prefix(self.len)) {
                // SAFETY: `bigger` is not shared yet (no view of it exists).
                unsafe { *dst.get() = src };
            }
            self.buf = bigger;
        }
        // SAFETY: slot `len` lies past the end of every view of this buffer
        // (views end at most at `len`), and this log is its only writer.
        unsafe { *self.buf.slots[self.len].get() = s };
        self.len += 1;
    }

    /// Segments in the log.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the log holds no segment.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole log as a slice.
    pub fn as_slice(&self) -> &[Segment] {
        self.buf.prefix(self.len)
    }

    /// True when `prompt` is a view of this log as it is now (all of it).
    pub fn is_viewed_by(&self, prompt: &Prompt) -> bool {
        matches!(&prompt.0, Repr::View(buf, end) if Arc::ptr_eq(buf, &self.buf) && *end as usize == self.len)
    }

    /// Write the log as it is now (all its segments) into `prompt`, sharing
    /// the log's storage (no copy of the segments).
    pub fn view_into(&self, prompt: &mut Prompt) {
        prompt.0 = Repr::View(Arc::clone(&self.buf), self.len as u32);
    }
}

impl Default for SegmentLog {
    fn default() -> SegmentLog {
        SegmentLog::from_slice(&[])
    }
}

impl fmt::Debug for SegmentLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// A request's prompt segments: dereferences to `&[Segment]` (and, after
/// copying a shared view into its own list, to `&mut [Segment]`). Cleared
/// and refilled when its request record is recycled; an own list keeps its
/// capacity (a view, when cleared, leaves an empty list).
///
/// 24 bytes, the size of the `Vec` it replaced: the view variant fits
/// beside the list's capacity, whose top bit no `Vec` uses (the request
/// record is held by the million in large runs; see
/// `request::tests::the_request_record_stays_small`).
#[derive(Clone)]
pub struct Prompt(Repr);

/// The two forms of a [`Prompt`] (private: a view's end must never pass its
/// log's length when the view was made).
#[derive(Clone)]
enum Repr {
    /// The prompt's own segments.
    Own(Vec<Segment>),
    /// A view: the first `end` segments of a session's log.
    View(Arc<LogBuf>, u32),
}

impl Default for Prompt {
    fn default() -> Prompt {
        Prompt(Repr::Own(Vec::new()))
    }
}

impl Prompt {
    /// An empty prompt.
    pub fn new() -> Prompt {
        Prompt::default()
    }

    /// An empty prompt whose own list has room for `n` segments.
    pub fn with_capacity(n: usize) -> Prompt {
        Prompt(Repr::Own(Vec::with_capacity(n)))
    }

    /// Remove every segment (a view lets go of its log; an own list keeps
    /// its capacity).
    #[inline]
    pub fn clear(&mut self) {
        match &mut self.0 {
            Repr::Own(v) => v.clear(),
            Repr::View(..) => self.0 = Repr::Own(Vec::new()),
        }
    }

    /// Append a segment (a view is first copied into an own list).
    pub fn push(&mut self, s: Segment) {
        self.make_own().push(s);
    }

    /// Append segments (a view is first copied into an own list).
    pub fn extend_from_slice(&mut self, s: &[Segment]) {
        self.make_own().extend_from_slice(s);
    }

    /// Make this prompt equal to `other`: a view of the same log when
    /// `other` is one (no copy), else a copy into the own list (which keeps
    /// its capacity).
    #[inline]
    pub fn assign(&mut self, other: &Prompt) {
        match &other.0 {
            Repr::View(buf, end) => self.0 = Repr::View(Arc::clone(buf), *end),
            Repr::Own(o) => {
                self.clear();
                self.make_own().extend_from_slice(o);
            }
        }
    }

    /// Capacity of the own list (what a recycled record keeps; 0 for a view).
    pub fn capacity(&self) -> usize {
        match &self.0 {
            Repr::Own(v) => v.capacity(),
            Repr::View(..) => 0,
        }
    }

    /// True when the prompt is a view of a session's log.
    pub fn is_view(&self) -> bool {
        matches!(self.0, Repr::View(..))
    }

    /// True when both prompts are views of the same log storage (the first
    /// segments of one are then the very same memory as the other's).
    pub fn shares_storage_with(&self, other: &Prompt) -> bool {
        match (&self.0, &other.0) {
            (Repr::View(a, _), Repr::View(b, _)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    fn make_own(&mut self) -> &mut Vec<Segment> {
        if let Repr::View(buf, end) = &self.0 {
            self.0 = Repr::Own(buf.prefix(*end as usize).to_vec());
        }
        match &mut self.0 {
            Repr::Own(v) => v,
            Repr::View(..) => unreachable!("made own above"),
        }
    }
}

impl Deref for Prompt {
    type Target = [Segment];
    #[inline]
    fn deref(&self) -> &[Segment] {
        match &self.0 {
            Repr::View(buf, end) => buf.prefix(*end as usize),
            Repr::Own(v) => v,
        }
    }
}

impl DerefMut for Prompt {
    fn deref_mut(&mut self) -> &mut [Segment] {
        self.make_own()
    }
}

impl fmt::Debug for Prompt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl PartialEq for Prompt {
    fn eq(&self, other: &Prompt) -> bool {
        **self == **other
    }
}

impl Eq for Prompt {}

impl From<Vec<Segment>> for Prompt {
    fn from(own: Vec<Segment>) -> Prompt {
        Prompt(Repr::Own(own))
    }
}

impl FromIterator<Segment> for Prompt {
    fn from_iter<I: IntoIterator<Item = Segment>>(iter: I) -> Prompt {
        Prompt::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl<'a> IntoIterator for &'a Prompt {
    type Item = &'a Segment;
    type IntoIter = std::slice::Iter<'a, Segment>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(seed: u64, len: u32) -> Segment {
        Segment { seed, len }
    }

    #[test]
    fn views_are_prefixes_that_survive_growth() {
        let mut log = SegmentLog::from_slice(&[seg(1, 10)]);
        let mut views = Vec::new();
        for i in 0..100u64 {
            let mut p = Prompt::new();
            log.view_into(&mut p);
            views.push(p);
            log.push(seg(100 + i, i as u32));
        }
        for (k, v) in views.iter().enumerate() {
            assert_eq!(v.len(), k + 1);
            assert_eq!(v[0], seg(1, 10));
            for i in 1..=k {
                assert_eq!(v[i], seg(100 + i as u64 - 1, i as u32 - 1));
            }
        }
        // Consecutive views share one buffer until it grows (capacity 4,
        // then 8, 16, …): views 4..8 hold the 8-slot buffer.
        assert!(views[4].shares_storage_with(&views[7]));
        assert!(!views[3].shares_storage_with(&views[4]));
        assert_eq!(log.len(), 101);
    }

    #[test]
    fn writing_a_view_copies_it_and_leaves_the_log_alone() {
        let mut log = SegmentLog::from_slice(&[seg(1, 3), seg(2, 4)]);
        let mut p = Prompt::with_capacity(8);
        log.view_into(&mut p);
        let q = p.clone();
        assert!(p.is_view() && p.shares_storage_with(&q));
        p.push(seg(3, 5));
        assert!(!p.is_view());
        assert_eq!(*p, [seg(1, 3), seg(2, 4), seg(3, 5)]);
        p[0].len = 9;
        assert_eq!(*q, [seg(1, 3), seg(2, 4)]);
        assert_eq!(log.as_slice(), [seg(1, 3), seg(2, 4)]);
        log.push(seg(7, 7));
        assert_eq!(*q, [seg(1, 3), seg(2, 4)], "a view is fixed at its end");
        let mut r = Prompt::new();
        r.assign(&q);
        assert!(r.shares_storage_with(&q) && r == q);
        r.clear();
        assert!(r.is_empty() && !r.is_view());
        r.assign(&p);
        assert_eq!(r, p);
        assert!(!r.is_view());
    }
}
