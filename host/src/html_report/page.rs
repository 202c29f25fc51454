//! The HTML page around the plots: a self-contained document (inline CSS,
//! no scripts, no external resources), headings and tables.

use serde_json::Value;

/// Escape text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A whole page.
pub fn document(title: &str, body: &str) -> String {
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="generator" content="blis report">
<title>{t}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ccc; }}
.plots {{ display: flex; flex-wrap: wrap; gap: 12px; }}
figure.plot {{ margin: 0; border: 1px solid #ddd; }}
figure.plot figcaption {{ font-size: 0.8em; color: #555; padding: 2px 6px; max-width: 548px; }}
div.missing {{ width: 540px; padding: 10px; color: #666; font-size: 0.9em; }}
table {{ border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }}
th, td {{ border: 1px solid #ccc; padding: 3px 7px; text-align: right; }}
th {{ background: #f2f2f2; }} td.l, th.l {{ text-align: left; }}
.meta {{ color: #555; font-size: 0.9em; }}
</style>
</head>
<body>
<h1>{t}</h1>
{body}
</body>
</html>
"#,
        t = escape(title)
    )
}

/// A number for a table cell: integers as they are, others with 4 significant digits.
pub fn num(v: &Value) -> String {
    match v {
        Value::Null => "–".into(),
        Value::Number(n) if n.is_u64() || n.is_i64() => n.to_string(),
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            if x == 0.0 || (x.abs() >= 0.01 && x.abs() < 1e6) {
                let s = format!("{x:.3}");
                s.trim_end_matches('0').trim_end_matches('.').to_string()
            } else {
                format!("{x:.3e}")
            }
        }
        Value::String(s) => escape(s),
        other => escape(&other.to_string()),
    }
}

/// A table: a header row and rows of cells (first column left-aligned).
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::from("<table><tr>");
    for (i, h) in header.iter().enumerate() {
        let class = if i == 0 { " class=\"l\"" } else { "" };
        s.push_str(&format!("<th{class}>{}</th>", escape(h)));
    }
    s.push_str("</tr>\n");
    for r in rows {
        s.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            let class = if i == 0 { " class=\"l\"" } else { "" };
            s.push_str(&format!("<td{class}>{c}</td>"));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
    s
}
