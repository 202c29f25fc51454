//! Prompts of `blis serve`: the text of an OpenAI request as simulated
//! tokens. With the run file's `[serve] tokenizer` (a Hugging Face
//! `tokenizer.json`, read with Hugging Face's `tokenizers` crate), the
//! tokens it encodes (special tokens added, as vLLM does for completions;
//! a chat's messages are encoded one after the other, without a chat
//! template). Without one, one token per whitespace-separated word (a
//! documented approximation: `blis observe` measures a server's tokens per
//! word and sends that many words per token, so its requests round-trip
//! exactly). The tokens of each KV block become one prompt segment whose
//! seed is a hash of those tokens, so two prompts sharing their first
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

/// How text becomes tokens.
pub enum Tokenize {
    /// One token per whitespace-separated word.
    Words,
    /// A Hugging Face tokenizer.
    Tokenizer(Box<tokenizers::Tokenizer>),
}

impl Tokenize {
    /// The tokenizer of `path` (a `tokenizer.json`); the error names it.
    pub fn load(path: &std::path::Path) -> Result<Tokenize, String> {
        tokenizers::Tokenizer::from_file(path)
            .map(|t| Tokenize::Tokenizer(Box::new(t)))
            .map_err(|e| {
                format!(
                    "serve.tokenizer: cannot load {}: {e} (give a Hugging Face tokenizer.json, or leave the key out to count one token per word)",
                    path.display()
                )
            })
    }

    /// `text`'s tokens, as keys (a word's hash, or a token id), onto `out`.
    fn keys(&self, text: &str, out: &mut Vec<u64>) -> Result<(), String> {
        match self {
            Tokenize::Words => out.extend(text.split_whitespace().map(|w| fnv64(w.as_bytes()))),
            Tokenize::Tokenizer(t) => {
                let enc = t
                    .encode(text, true)
                    .map_err(|e| format!("the tokenizer cannot encode the prompt: {e}"))?;
                out.extend(enc.get_ids().iter().map(|&id| u64::from(id)));
            }
        }
        Ok(())
    }
}

/// Tokens (`keys`) in segments of `block` tokens.
fn prompted(keys: &[u64], block: u32) -> Result<Prompted, String> {
    let n = keys.len();
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
        for key in &keys[k..end] {
            seed = fnv(seed, &key.to_le_bytes());
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
pub fn from_prompt(p: Option<&Value>, block: u32, tok: &Tokenize) -> Result<Prompted, String> {
    match p {
        Some(Value::String(s)) => {
            let mut keys = Vec::new();
            tok.keys(s, &mut keys)?;
            prompted(&keys, block)
        }
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            from_prompt(Some(&a[0]), block, tok)
        }
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_u64) => {
            // Token ids: each id one token.
            let keys: Vec<u64> = a.iter().filter_map(Value::as_u64).collect();
            prompted(&keys, block)
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
pub fn from_messages(m: Option<&Value>, block: u32, tok: &Tokenize) -> Result<Prompted, String> {
    let Some(Value::Array(msgs)) = m else {
        return Err("messages must be a list of messages".into());
    };
    let mut keys = Vec::new();
    for msg in msgs {
        match msg.get("content") {
            Some(Value::String(s)) => tok.keys(s, &mut keys)?,
            Some(Value::Array(parts)) => {
                for p in parts {
                    if let Some(t) = p.get("text").and_then(Value::as_str) {
                        tok.keys(t, &mut keys)?;
                    }
                }
            }
            _ => {}
        }
    }
    prompted(&keys, block)
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
        let w = &Tokenize::Words;
        let a = from_prompt(Some(&json!("a b c d e f g")), 4, w).unwrap();
        let b = from_prompt(Some(&json!("a b c d x y")), 4, w).unwrap();
        assert_eq!((a.tokens, b.tokens), (7, 6));
        assert_eq!(a.segments[0], b.segments[0]);
        assert_ne!(a.segments[1], b.segments[1]);
        assert_eq!(a.segments.iter().map(|s| s.len).collect::<Vec<_>>(), [4, 3]);
        assert_ne!(a.seed, b.seed);
    }

    #[test]
    fn prompts_and_messages_are_read_as_vllm_takes_them() {
        let w = &Tokenize::Words;
        assert_eq!(from_prompt(Some(&json!(["a b"])), 16, w).unwrap().tokens, 2);
        assert_eq!(
            from_prompt(Some(&json!([1, 2, 3])), 16, w).unwrap().tokens,
            3
        );
        assert!(from_prompt(None, 16, w).is_err());
        assert!(from_prompt(Some(&json!("")), 16, w).is_err());
        assert!(from_prompt(Some(&json!(["a", "b"])), 16, w).is_err());
        let m = json!([{"role": "system", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "hi there"}]}]);
        assert_eq!(from_messages(Some(&m), 16, w).unwrap().tokens, 4);
        assert!(from_messages(Some(&json!("x")), 16, w).is_err());
    }

    #[test]
    fn a_tokenizer_json_counts_its_own_tokens() {
        // A WordPiece-free word-level tokenizer whose pre-tokenizer splits
        // on punctuation too: "a,b" is three tokens, not one word.
        let dir = std::env::temp_dir().join(format!("blis-tok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokenizer.json");
        std::fs::write(
            &path,
            r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
"model":{"type":"WordLevel","vocab":{"[UNK]":0,"a":1,"b":2,",":3},"unk_token":"[UNK]"}}"#,
        )
        .unwrap();
        let t = Tokenize::load(&path).unwrap();
        let p = from_prompt(Some(&json!("a,b zz a")), 2, &t).unwrap();
        assert_eq!(p.tokens, 5);
        assert_eq!(
            p.segments.iter().map(|s| s.len).collect::<Vec<_>>(),
            [2, 2, 1]
        );
        // Same ids, same segments: "a , b" shares the first block.
        let q = from_prompt(Some(&json!("a , b")), 2, &t).unwrap();
        assert_eq!(q.segments[0], p.segments[0]);
        let e = Tokenize::load(&dir.join("missing.json")).err().unwrap();
        assert!(
            e.contains("serve.tokenizer") && e.contains("missing.json"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
