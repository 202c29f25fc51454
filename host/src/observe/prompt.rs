//! Prompt text for `blis observe`: blis requests are token counts and
//! segments (seeded content), a real server wants text. Each segment
//! becomes words of a fixed 100-word vocabulary chosen by its seed, so a
//! shared prefix is the same text in every request of its group and a
//! session round's prompt starts with the previous round's text (the
//! server's prefix cache has something to find, as in the simulation).
//!
//! The number of words per segment is `round(len / tokens_per_word)`,
//! where tokens per word is measured once against the server
//! ([`calibration_prompt`]; spec §2.5).

use crate::request::{mix64, Request, Segment};

/// The fixed vocabulary (100 words; each is one token in most tokenizers).
pub const VOCAB: [&str; 100] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu", "apple", "banana", "cherry", "grape",
    "lemon", "mango", "melon", "olive", "peach", "pear", "plum", "berry", "red", "green", "blue",
    "black", "white", "brown", "gray", "pink", "gold", "silver", "north", "south", "east", "west",
    "river", "lake", "sea", "hill", "stone", "tree", "leaf", "root", "seed", "flower", "grass",
    "rain", "snow", "wind", "cloud", "storm", "sun", "moon", "star", "sky", "fire", "water",
    "earth", "iron", "wood", "glass", "paper", "bread", "milk", "salt", "sugar", "tea", "house",
    "door", "road", "bridge", "tower", "city", "town", "field", "farm", "horse", "bird", "fish",
    "wolf", "bear", "lion", "tiger",
];

/// The calibration request's prompt: the 100 words once each.
pub fn calibration_prompt() -> String {
    VOCAB.join(" ")
}

/// Tokens per word from the calibration request's `prompt_tokens`,
/// accepted in [1.0, 3.0], else 1.0 (spec §2.5).
pub fn tokens_per_word(prompt_tokens: Option<u64>) -> f64 {
    match prompt_tokens {
        Some(n) => {
            let tpw = n as f64 / VOCAB.len() as f64;
            if (1.0..=3.0).contains(&tpw) {
                tpw
            } else {
                1.0
            }
        }
        None => 1.0,
    }
}

fn words_for(tokens: u32, tpw: f64) -> usize {
    (f64::from(tokens) / tpw).round() as usize
}

fn push_segment(out: &mut String, seg: Segment, words: usize) {
    for j in 0..words {
        let w = VOCAB[(mix64(seg.seed.wrapping_add(j as u64)) % VOCAB.len() as u64) as usize];
        out.push_str(w);
        out.push(' ');
    }
}

/// The prompt text of `req` into `out` (cleared first): every prompt
/// segment as words, at least one word in all. Words are separated by
/// spaces, with a trailing space.
pub fn prompt_text(req: &Request, tpw: f64, out: &mut String) {
    out.clear();
    let mut total = 0;
    for seg in &req.prompt {
        let n = words_for(seg.len, tpw);
        push_segment(out, *seg, n);
        total += n;
    }
    if total == 0 {
        push_segment(
            out,
            Segment {
                seed: req.id,
                len: 1,
            },
            1,
        );
    }
    while out.ends_with(' ') && out.len() > 1 {
        out.pop();
    }
}

/// The prewarm prompt: 256 words "warm".
pub fn prewarm_prompt() -> String {
    let mut s = "warm ".repeat(256);
    s.pop();
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(segs: &[(u64, u32)]) -> Request {
        Request {
            prompt: segs
                .iter()
                .map(|&(seed, len)| Segment { seed, len })
                .collect(),
            ..Request::default()
        }
    }

    #[test]
    fn vocabulary_has_100_distinct_words() {
        let mut v = VOCAB.to_vec();
        v.sort_unstable();
        v.dedup();
        assert_eq!(v.len(), 100);
    }

    #[test]
    fn tokens_per_word_is_clamped_to_the_accepted_range() {
        assert_eq!(tokens_per_word(Some(101)), 1.01);
        assert_eq!(tokens_per_word(Some(300)), 3.0);
        assert_eq!(tokens_per_word(Some(301)), 1.0);
        assert_eq!(tokens_per_word(Some(99)), 1.0);
        assert_eq!(tokens_per_word(None), 1.0);
    }

    #[test]
    fn words_follow_segments_and_shared_segments_share_text() {
        let mut a = String::new();
        let mut b = String::new();
        // Same prefix segment (seed 7, 4 tokens), different suffixes.
        prompt_text(&req(&[(7, 4), (1, 3)]), 1.0, &mut a);
        prompt_text(&req(&[(7, 4), (2, 5)]), 1.0, &mut b);
        let wa: Vec<&str> = a.split(' ').collect();
        let wb: Vec<&str> = b.split(' ').collect();
        assert_eq!(wa.len(), 7);
        assert_eq!(wb.len(), 9);
        assert_eq!(wa[..4], wb[..4]);
        // Two tokens per word halves the words (rounded).
        prompt_text(&req(&[(7, 4), (1, 3)]), 2.0, &mut a);
        assert_eq!(a.split(' ').count(), 2 + 2);
        // Never empty.
        prompt_text(&req(&[(7, 0)]), 1.0, &mut a);
        assert_eq!(a.split(' ').count(), 1);
        assert!(!a.is_empty() && !a.ends_with(' '));
    }
}
