//! TraceV2 format tests: strict header, every column layout, row errors
//! with file and line, writer round trips, the reference fixtures.

use std::path::{Path, PathBuf};

use super::*;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("blis-tracev2-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/workload-head")
        .join(name)
}

fn header_err(text: &str) -> String {
    parse_header(text, "h.yaml").unwrap_err().to_string()
}

#[test]
fn fixture_headers_and_rows_load() {
    let h = read_header(&fixture("calibrate-basic.trace.yaml")).unwrap();
    assert_eq!(h.mode, TraceMode::Real);
    assert_eq!(h.trace_version, 2);
    assert_eq!(h.time_unit, "microseconds");
    assert_eq!(h.warm_up_requests, 0);
    let rows: Vec<TraceRecord> = TraceReader::open(&fixture("calibrate-basic.trace.csv"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(rows.len(), 3);
    let r = &rows[1];
    assert_eq!(r.request_id, 1);
    assert_eq!((r.client_id.as_str(), r.tenant_id.as_str()), ("c1", "t1"));
    assert_eq!(r.slo_class, "standard");
    assert_eq!(r.session_id, "s1");
    assert!(r.streaming);
    assert_eq!(
        (r.input_tokens, r.output_tokens, r.text_tokens),
        (10, 5, 10)
    );
    assert_eq!(r.server_input_tokens, 10);
    assert_eq!(
        (
            r.arrival_time_us,
            r.send_time_us,
            r.first_chunk_time_us,
            r.last_chunk_time_us
        ),
        (100000, 101000, 105000, 110000)
    );
    assert_eq!(r.num_chunks, 5);
    assert_eq!(r.status, TraceStatus::Ok);
    assert_eq!(r.finish_reason, "stop");
    let h = read_header(&fixture("replay-three-requests.trace.yaml")).unwrap();
    assert_eq!(h.mode, TraceMode::Generated);
    let rows: Vec<_> = TraceReader::open(&fixture("replay-three-requests.trace.csv"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        rows.iter().map(|r| r.send_time_us).collect::<Vec<_>>(),
        vec![0, 100000, 200000]
    );
}

#[test]
fn unknown_header_keys_are_named_at_every_level() {
    let e = header_err("mode: real\ncolour: blue\n");
    assert!(e.contains("h.yaml") && e.contains("`colour`"), "{e}");
    let e = header_err("mode: real\nserver:\n  type: vllm\n  gpus: 8\n");
    assert!(e.contains("`gpus`") && e.contains("server"), "{e}");
    let e = header_err("mode: real\nnetwork:\n  rtt: 3\n");
    assert!(e.contains("`rtt`"), "{e}");
    let e = header_err("mode: real\ngoodput_slo_targets:\n  critical:\n    ttft: 100\n");
    assert!(e.contains("`ttft`"), "{e}");
    let e = header_err(
        "mode: real\nobserved_kv_metrics:\n  source: tiered\n  hit_rate: 0.5\n  block_hits: 1\n  block_queries: 2\n  extra: 1\n",
    );
    assert!(e.contains("`extra`"), "{e}");
}

#[test]
fn header_values_are_checked() {
    let e = header_err("mode: real\nsession_context_growth: Accumulate\n");
    assert!(
        e.contains("session_context_growth") && e.contains("Accumulate"),
        "{e}"
    );
    let h = parse_header("mode: real\nsession_context_growth: accumulate\n", "h").unwrap();
    assert_eq!(
        h.session_context_growth,
        Some(SessionContextGrowth::Accumulate)
    );
    let e = header_err("mode: simulated\n");
    assert!(e.contains("simulated"), "{e}");
    let e = header_err("trace_version: 3\n");
    assert!(e.contains("mode"), "{e}");
    let e = header_err("mode: real\nwarm_up_requests: -1\n");
    assert!(e.contains("warm_up_requests") || e.contains("-1"), "{e}");
    // trace_version is not checked; kv_offload is carried verbatim.
    let h = parse_header(
        "trace_version: 99\nmode: generated\nkv_offload:\n  cpu_blocks: 10\n  anything: [1, 2]\n",
        "h",
    )
    .unwrap();
    assert_eq!(h.trace_version, 99);
    assert_eq!(h.kv_offload.as_ref().unwrap().len(), 2);
}

#[test]
fn header_round_trips_through_yaml() {
    let mut h = TraceHeader::new(TraceMode::Real);
    h.time_unit = "us".into();
    h.created_at = Some("2026-12-01T00:00:00Z".into());
    h.warm_up_requests = 4;
    h.workload_seed = Some(-7);
    h.workload_spec = Some("preset:chat".into());
    h.session_context_growth = Some(SessionContextGrowth::Accumulate);
    h.server = Some(ServerInfo {
        server_type: "vllm".into(),
        model: "m".into(),
        tensor_parallel: 2,
        ..ServerInfo::default()
    });
    h.network = Some(NetworkInfo {
        measured_rtt_ms: 1.5,
    });
    h.goodput_slo_targets = Some(
        [(
            "critical".to_string(),
            GoodputTarget {
                ttft_ms: 100.0,
                itl_ms: 0.0,
                e2e_ms: 2000.0,
            },
        )]
        .into(),
    );
    h.observed_kv_metrics = Some(ObservedKvMetrics {
        source: KvMetricsSource::GpuPrefixCacheFallback,
        hit_rate: 0.25,
        block_hits: 10.0,
        block_queries: 40.0,
        read_time_total: None,
        write_time_total: Some(3.0),
        vllm_commit: Some("abc".into()),
    });
    let y = h.to_yaml();
    assert!(y.contains("source: gpu-prefix-cache-fallback"), "{y}");
    assert!(
        y.contains("type: vllm") && !y.contains("max_num_seqs"),
        "{y}"
    );
    assert_eq!(parse_header(&y, "h").unwrap(), h);
    let g = TraceHeader::new(TraceMode::Generated).to_yaml();
    assert_eq!(
        g,
        "trace_version: 3\ntime_unit: microseconds\nmode: generated\nwarm_up_requests: 0\n"
    );
}

fn full_record(i: u64) -> TraceRecord {
    TraceRecord {
        request_id: i,
        client_id: "c,1".into(),
        tenant_id: "t\"q".into(),
        slo_class: "critical".into(),
        vllm_priority: 2,
        session_id: format!("s{i}"),
        round_index: i % 3,
        prefix_group: "g".into(),
        prefix_length: 16,
        streaming: i % 2 == 0,
        input_tokens: 100 + i,
        output_tokens: 7,
        text_tokens: 100,
        image_tokens: 1,
        audio_tokens: 2,
        video_tokens: 3,
        reason_ratio: 0.125,
        model: "llama".into(),
        deadline_us: 5_000_000,
        slo_target_us: 250_000,
        server_input_tokens: 116,
        arrival_time_us: 1000 * i as i64,
        send_time_us: 1_700_000_000_000_000 + i as i64,
        first_chunk_time_us: 1_700_000_000_004_000,
        last_chunk_time_us: 1_700_000_000_009_000,
        num_chunks: 8,
        status: [
            TraceStatus::Ok,
            TraceStatus::Error,
            TraceStatus::Timeout,
            TraceStatus::Incomplete,
        ][i as usize % 4],
        error_message: "HTTP 500: boom, \"bad\"\nline".into(),
        finish_reason: "length".into(),
        x_request_id: format!("uuid-{i}"),
        adapter: "lora-a".into(),
        think_time_us: 1234,
    }
}

/// What a record reads back as when `cols` omits some optional columns.
fn masked(mut r: TraceRecord, cols: TraceColumns) -> TraceRecord {
    if !cols.vllm_priority {
        r.vllm_priority = 0;
    }
    if !cols.slo_target_us {
        r.slo_target_us = 0;
    }
    if !cols.x_request_id {
        r.x_request_id.clear();
    }
    if !cols.adapter {
        r.adapter.clear();
    }
    if !cols.think_time_us {
        r.think_time_us = 0;
    }
    r
}

#[test]
fn every_column_layout_round_trips() {
    let d = scratch("layouts");
    for bits in 0u8..32 {
        let cols = TraceColumns {
            vllm_priority: bits & 1 != 0,
            slo_target_us: bits & 2 != 0,
            x_request_id: bits & 4 != 0,
            adapter: bits & 8 != 0,
            think_time_us: bits & 16 != 0,
        };
        let (hp, dp) = prefix_paths(&d.join(format!("t{bits}")));
        let mut w = TraceV2Writer::create(&hp, &dp, cols).unwrap();
        let recs: Vec<TraceRecord> = (0..5).map(full_record).collect();
        for r in &recs {
            w.write(r).unwrap();
        }
        assert_eq!(w.rows(), 5);
        w.finish(&TraceHeader::new(TraceMode::Generated)).unwrap();
        assert_eq!(read_header(&hp).unwrap().mode, TraceMode::Generated);
        let rd = TraceReader::open(&dp).unwrap();
        assert_eq!(rd.columns(), cols, "layout {bits}");
        let back: Vec<TraceRecord> = rd.map(Result::unwrap).collect();
        let want: Vec<TraceRecord> = recs
            .into_iter()
            .map(|r| masked(r, cols))
            .map(|mut r| {
                r.error_message = r.error_message.trim().to_string();
                r
            })
            .collect();
        assert_eq!(back, want, "layout {bits}");
        // The header row is exactly the named columns.
        let text = std::fs::read_to_string(&dp).unwrap();
        assert_eq!(text.lines().next().unwrap(), cols.names().join(","));
    }
}

#[test]
fn needed_by_applies_the_reference_rule() {
    let mut r = TraceRecord::default();
    assert_eq!(
        TraceColumns::needed_by([&r], false),
        TraceColumns::default()
    );
    r.slo_class = "standard".into();
    assert!(!TraceColumns::needed_by([&r], false).vllm_priority);
    let real = TraceColumns::needed_by([&r], true);
    assert!(real.vllm_priority && real.x_request_id && !real.adapter);
    r.slo_target_us = 1;
    r.adapter = "a".into();
    r.think_time_us = 5;
    let c = TraceColumns::needed_by([&r], false);
    assert!(c.slo_target_us && c.adapter && c.think_time_us && !c.x_request_id);
}

const HEAD: &str = "request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason";
const ROW: &str = "0,c,t,,,0,,0,true,10,5,10,0,0,0,0.5,,0,0,0,0,0,0,0,ok, x ,";

fn rows_of(dir: &Path, name: &str, text: &str) -> Result<Vec<TraceRecord>, String> {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    let rd = TraceReader::open(&p).map_err(|e| e.to_string())?;
    rd.collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())
}

#[test]
fn reader_tolerates_extra_columns_blank_lines_and_trims_messages() {
    let d = scratch("extra");
    let rows = rows_of(
        &d,
        "a.csv",
        &format!("{HEAD},extra,think_time_us\n{ROW},zz,77\n\n{ROW},zz,0\n"),
    )
    .unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].think_time_us, 77);
    assert_eq!(rows[0].error_message, "x");
    assert_eq!(rows[0].reason_ratio, 0.5);
}

#[test]
fn row_errors_name_file_line_and_column() {
    let d = scratch("errors");
    let e = rows_of(&d, "short.csv", &format!("{HEAD}\n{ROW}\n0,c,t\n")).unwrap_err();
    assert!(
        e.contains("short.csv:3:") && e.contains("3 fields") && e.contains("27"),
        "{e}"
    );
    // A trailing optional column raises the minimum.
    let e = rows_of(&d, "trail.csv", &format!("{HEAD},adapter\n{ROW}\n")).unwrap_err();
    assert!(
        e.contains("trail.csv:2:") && e.contains("at least 28"),
        "{e}"
    );
    let neg = ROW.replacen(",10,5,", ",-10,5,", 1);
    let e = rows_of(&d, "neg.csv", &format!("{HEAD}\n{neg}\n")).unwrap_err();
    assert!(
        e.contains("neg.csv:2:") && e.contains("input_tokens") && e.contains("negative"),
        "{e}"
    );
    let bad = ROW.replacen("true", "yes", 1);
    let e = rows_of(&d, "bool.csv", &format!("{HEAD}\n{bad}\n")).unwrap_err();
    assert!(e.contains("column streaming"), "{e}");
    let bad = ROW.replacen(",ok,", ",fine,", 1);
    let e = rows_of(&d, "st.csv", &format!("{HEAD}\n{bad}\n")).unwrap_err();
    assert!(e.contains("column status"), "{e}");
    let bad = ROW.replacen("0.5", "1.5", 1);
    let e = rows_of(&d, "rr.csv", &format!("{HEAD}\n{bad}\n")).unwrap_err();
    assert!(e.contains("reason_ratio"), "{e}");
    // deadline before a positive arrival
    let bad = "0,c,t,,,0,,0,true,10,5,10,0,0,0,0.5,,50,0,100,0,0,0,0,ok,,";
    let e = rows_of(&d, "dl.csv", &format!("{HEAD}\n{bad}\n")).unwrap_err();
    assert!(e.contains("deadline_us") && e.contains("dl.csv:2:"), "{e}");
    let e = rows_of(&d, "hdr.csv", "request_id,client_id\n").unwrap_err();
    assert!(
        e.contains("hdr.csv:1:") && e.contains("27 base columns"),
        "{e}"
    );
    let e = rows_of(&d, "empty.csv", "").unwrap_err();
    assert!(e.contains("empty.csv:1:"), "{e}");
    let e = TraceReader::open(&d.join("missing.csv"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.csv"), "{e}");
}

/// Every field of a CSV line quoted (what the csv crate reads).
fn quote_all(line: &str) -> String {
    line.split(',')
        .map(|f| format!("\"{f}\""))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn plain_and_quoted_lines_read_alike_with_the_same_line_numbers() {
    let d = scratch("plain-quoted");
    let rows: Vec<String> = (0..6)
        .map(|i| {
            ROW.replacen("0,c,t,", &format!("{i},c{i},t,"), 1).replacen(
                ",10,5,",
                &format!(",{},5,", 10 + i),
                1,
            )
        })
        .collect();
    let plain = format!("{HEAD}\n{}\n", rows.join("\n"));
    let quoted = format!(
        "{}\n{}\n",
        quote_all(HEAD),
        rows.iter()
            .map(|r| quote_all(r))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let crlf = plain.replace('\n', "\r\n");
    let a = rows_of(&d, "plain.csv", &plain).unwrap();
    assert_eq!(a.len(), 6);
    assert_eq!(a[3].input_tokens, 13);
    assert_eq!(a[3].client_id, "c3");
    assert_eq!(a[5].error_message, "x");
    assert_eq!(rows_of(&d, "quoted.csv", &quoted).unwrap(), a);
    assert_eq!(rows_of(&d, "crlf.csv", &crlf).unwrap(), a);
    // Plain lines, then a quoted field spanning two lines, then plain lines
    // again (read by the csv crate from the quote on): a bad row after it is
    // named by its line in the file.
    let multi = ROW.replacen(", x ,", ",\"two\nlines, here\",", 1);
    let bad = ROW.replacen(",ok,", ",fine,", 1);
    let text = format!("{HEAD}\n{ROW}\n{multi}\n{ROW}\n{bad}\n");
    let e = rows_of(&d, "mixed.csv", &text).unwrap_err();
    assert!(
        e.contains("mixed.csv:6:") && e.contains("column status"),
        "{e}"
    );
    let text = format!("{HEAD}\n{ROW}\n{multi}\n{ROW}\n");
    let got = rows_of(&d, "mixed-ok.csv", &text).unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].error_message, "two\nlines, here");
    assert_eq!(got[2], got[0]);
    let mut rd = TraceReader::open(&d.join("mixed-ok.csv")).unwrap();
    let mut r = TraceRecord::default();
    let lines: Vec<u64> = std::iter::from_fn(|| rd.read_into(&mut r).unwrap()).collect();
    assert_eq!(lines, [2, 3, 5]);
    // Invalid UTF-8 after plain lines: named by its line, plain or not.
    let mut bytes = format!("{HEAD}\n{ROW}\n").into_bytes();
    bytes.extend_from_slice(b"0,c\xff,t,,,0,,0,true,10,5,10,0,0,0,0.5,,0,0,0,0,0,0,0,ok,,\n");
    let p = d.join("utf8.csv");
    std::fs::write(&p, bytes).unwrap();
    let e = TraceReader::open(&p)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("utf8.csv:3:") && e.contains("UTF-8"), "{e}");
}

#[test]
fn go_parsebool_spellings_are_accepted() {
    let d = scratch("bool");
    for (s, want) in [
        ("1", true),
        ("T", true),
        ("True", true),
        ("0", false),
        ("F", false),
    ] {
        let row = ROW.replacen("true", s, 1);
        let rows = rows_of(&d, "b.csv", &format!("{HEAD}\n{row}\n")).unwrap();
        assert_eq!(rows[0].streaming, want, "{s}");
    }
}

#[test]
fn an_unfinished_writer_leaves_nothing() {
    let d = scratch("drop");
    let (hp, dp) = prefix_paths(&d.join("t"));
    let mut w = TraceV2Writer::create(&hp, &dp, TraceColumns::default()).unwrap();
    w.write(&TraceRecord::default()).unwrap();
    drop(w);
    assert!(!hp.exists() && !dp.exists());
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), 0);
}
