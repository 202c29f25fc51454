//! Text blis did not write — a plugin's log lines, WASI stdout, error
//! messages, decision reasons and names; a server's answers in `observe`;
//! a user's file quoted in an error — made safe before it reaches a
//! terminal, a report or a trace: control characters escaped (no forged
//! lines, no escape sequences), and every piece cut to a size with a note
//! saying how much was cut. The plugin limits are the sandbox's,
//! documented in the book ("What a plugin can and cannot do").

/// Bytes of one log line (or WASI stdout line) shown.
pub const MAX_LINE: usize = 1_000;
/// Bytes of an error message a plugin returns (`create`, a failed call).
pub const MAX_ERROR: usize = 4_000;
/// Bytes of a decision reason kept in the decision trace.
pub const MAX_REASON: usize = 300;
/// Log lines (and WASI stdout lines) one policy may show in a run.
pub const MAX_LINES: u32 = 100;

/// `s` with its control characters escaped (`\n`, `\t`, `\u{1b}`…) and cut
/// after about `max` bytes, with a note of what was cut.
pub fn clean(s: &str, max: usize) -> String {
    clean_after_cut(s, max, 0)
}

/// A window of about `width` characters of `line` around character
/// `col` (1-based), cleaned, with `…` where it was cut: a source line
/// quoted in an error fits a screen however long the line is.
pub fn window(line: &str, col: usize, width: usize) -> String {
    let n = line.chars().count();
    if n <= width {
        return clean(line, width * 4);
    }
    let start = col
        .saturating_sub(1)
        .saturating_sub(width / 2)
        .min(n - width);
    let piece: String = line.chars().skip(start).take(width).collect();
    format!(
        "{}{}{}",
        if start > 0 { "…" } else { "" },
        clean(&piece, width * 4),
        if start + width < n { "…" } else { "" }
    )
}

/// [`clean`] of text of which `cut` bytes were already dropped by its
/// producer: one note counts both.
pub fn clean_after_cut(s: &str, max: usize, cut: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max) + 32);
    for (i, c) in s.char_indices() {
        if out.len() >= max {
            out.push_str(&format!("… ({} more bytes cut)", s.len() - i + cut));
            return out;
        }
        if c.is_control()
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if cut > 0 {
        out.push_str(&format!("… ({cut} more bytes cut)"));
    }
    out
}

/// Whether `name` can name a policy: not empty, no control characters or
/// spaces, no `::` (the library separator), at most 100 bytes.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a policy with an empty name".into());
    }
    if name.len() > 100 {
        return Err(format!(
            "a policy name of {} bytes (at most 100)",
            name.len()
        ));
    }
    if name.chars().any(|c| c.is_control() || c.is_whitespace()) || name.contains("::") {
        return Err(format!(
            "the policy name \"{}\" has a control character, a space or \"::\"",
            clean(name, 100)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_long_text_is_cut() {
        assert_eq!(
            clean("a\nerror: b\u{1b}[31m", 100),
            "a\\nerror: b\\u{1b}[31m"
        );
        let long = "x".repeat(5000);
        let c = clean(&long, 1000);
        assert!(
            c.starts_with(&"x".repeat(1000)) && c.ends_with("… (4000 more bytes cut)"),
            "{c}"
        );
        assert_eq!(clean("é€", 100), "é€");
        assert_eq!(clean_after_cut("ab", 100, 7), "ab… (7 more bytes cut)");
        assert_eq!(clean_after_cut("abcd", 2, 7), "ab… (9 more bytes cut)");
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("least-kv").is_ok());
        for bad in ["", "a\nb", "a b", "lib::x", &"n".repeat(101)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
