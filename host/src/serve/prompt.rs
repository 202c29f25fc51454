//! Prompts of `blis serve`: the text of an OpenAI request as simulated
//! tokens. Without a tokenizer, one token per whitespace-separated word (a
//! documented approximation: `blis observe` measures a server's tokens per
//! word and sends that many words per token, so its requests round-trip
//! exactly); the words of each KV block become one prompt segment whose
//! seed is a hash of those words, so two prompts sharing their first
//! blocks share those blocks' KV in the simulated prefix cache, as they
//! would on vLLM.

use axum::http::HeaderMap;
use serde_json::Value;

use crate::request::{Segment, SloClass};
use crate::sweep::spec::{fnv64, fnv64_more as fnv};

/// Output tokens of a chat request without `max_tokens` and without a
/// context limit (vLLM's default is the context's remainder).
pub const DEFAULT_CHAT_MAX_TOKENS: u64 = 4096;

/// The most prompt tokens a request may carry.
pub const MAX_PROMPT_TOKENS: u32 = 1 << 22;

/// A prompt as the simulation sees it.
#[derive(Debug, PartialEq)]
pub struct Prompted {
    pub tokens: u32,
    pub segments: Vec<Segment>,
    /// Seed of the output's content.
    pub seed: u64,
}

/// `words` in segments of `block` tokens.
fn prompted(words: &[&str], ids: usize, block: u32) -> Result<Prompted, String> {
    let n = words.len() + ids;
    if n == 0 {
        return Err("The prompt is empty: give at least one token".into());
    }
    let tokens = u32::try_from(n)
        .ok()
        .filter(|&t| t <= MAX_PROMPT_TOKENS)
        .ok_or_else(|| {
            format!("The prompt has {n} tokens, more than blis serve takes ({MAX_PROMPT_TOKENS})")
        })?;
    let block = block.max(1) as usize;
    let mut segments = Vec::with_capacity(n.div_ceil(block));
    let mut h = fnv64(&[]);
    let mut k = 0;
    while k < n {
        let end = (k + block).min(n);
        let mut seed = fnv64(&[]);
        for i in k..end {
            let w = words.get(i).copied().unwrap_or("\u{0}id");
            seed = fnv(fnv(seed, w.as_bytes()), b" ");
        }
        segments.push(Segment {
            seed,
            len: (end - k) as u32,
        });
        h = fnv(h, &seed.to_le_bytes());
        k = end;
    }
    Ok(Prompted {
        tokens,
        segments,
        seed: h,
    })
}

/// `/v1/completions`' `prompt`: a string, a list of one string, or a list
/// of token ids.
pub fn from_prompt(p: Option<&Value>, block: u32) -> Result<Prompted, String> {
    match p {
        Some(Value::String(s)) => prompted(&s.split_whitespace().collect::<Vec<_>>(), 0, block),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            from_prompt(Some(&a[0]), block)
        }
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_u64) => {
            // Token ids: each id one token (its text unknown: a fresh block).
            let words: Vec<String> = a.iter().map(|v| v.to_string()).collect();
            let refs: Vec<&str> = words.iter().map(String::as_str).collect();
            prompted(&refs, 0, block)
        }
        Some(Value::Array(_)) => {
            Err("blis serve takes one prompt per request (a string, or a list of token ids)".into())
        }
        Some(_) => Err("prompt must be a string or a list of token ids".into()),
        None => Err("Either prompt or prompt_embeds must be provided".into()),
    }
}

/// `/v1/chat/completions`' `messages`: every message's text content, in
/// order, as one prompt.
pub fn from_messages(m: Option<&Value>, block: u32) -> Result<Prompted, String> {
    let Some(Value::Array(msgs)) = m else {
        return Err("messages must be a list of messages".into());
    };
    let mut words: Vec<&str> = Vec::new();
    for msg in msgs {
        match msg.get("content") {
            Some(Value::String(s)) => words.extend(s.split_whitespace()),
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        words.extend(t.split_whitespace());
                    }
                }
            }
            _ => {}
        }
    }
    prompted(&words, 0, block)
}

/// The SLO class a request asks for (`x-gateway-inference-objective`, as
/// `blis observe` and llm-d send it); standard otherwise.
pub fn slo_class(headers: &HeaderMap) -> SloClass {
    headers
        .get("x-gateway-inference-objective")
        .and_then(|v| v.to_str().ok())
        .and_then(SloClass::parse)
        .unwrap_or(SloClass::Standard)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn shared_leading_blocks_have_equal_segments() {
        let a = from_prompt(Some(&json!("a b c d e f g")), 4).unwrap();
        let b = from_prompt(Some(&json!("a b c d x y")), 4).unwrap();
        assert_eq!((a.tokens, b.tokens), (7, 6));
        assert_eq!(a.segments[0], b.segments[0]);
        assert_ne!(a.segments[1], b.segments[1]);
        assert_eq!(a.segments.iter().map(|s| s.len).collect::<Vec<_>>(), [4, 3]);
        assert_ne!(a.seed, b.seed);
    }

    #[test]
    fn prompts_and_messages_are_read_as_vllm_takes_them() {
        assert_eq!(from_prompt(Some(&json!(["a b"])), 16).unwrap().tokens, 2);
        assert_eq!(from_prompt(Some(&json!([1, 2, 3])), 16).unwrap().tokens, 3);
        assert!(from_prompt(None, 16).is_err());
        assert!(from_prompt(Some(&json!("")), 16).is_err());
        assert!(from_prompt(Some(&json!(["a", "b"])), 16).is_err());
        let m = json!([{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "hi there"}]}]);
        assert_eq!(from_messages(Some(&m), 16).unwrap().tokens, 4);
        assert!(from_messages(Some(&json!("x")), 16).is_err());
    }
}
