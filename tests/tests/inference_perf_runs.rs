//! `blis convert inference-perf RESULTS_DIR` on the 16 public inference-sim
//! training runs (`examples/sim-to-real/default_args/`, from
//! inference-sim/training): the run file reproduces what each client
//! resolved (`results/config.yaml`), its deployment (`exp-config.yaml`),
//! and notes the profile keys the client ran otherwise; the run files
//! `generate.sh` made from them are valid.

use std::path::{Path, PathBuf};

use serde_yaml_ng::Value as Yaml;

use crate::util::TestDir;

fn runs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/sim-to-real/default_args")
}

fn experiments() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(runs_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && p.join("results/config.yaml").exists())
        .collect();
    v.sort();
    v
}

fn yaml(p: &Path) -> Yaml {
    serde_yaml_ng::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn num(v: &Yaml) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v:?}"))
}

#[test]
fn converting_each_run_folder_reproduces_the_config_its_client_resolved() {
    let exps = experiments();
    assert_eq!(exps.len(), 16);
    let dir = TestDir::new("inference_perf_runs_convert");
    for exp in &exps {
        let name = exp.file_name().unwrap().to_string_lossy().to_string();
        let o = dir
            .blis()
            .args(["convert", "inference-perf"])
            .arg(exp)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let run: toml::Table = toml::from_str(&String::from_utf8_lossy(&o.stdout))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let notes = String::from_utf8_lossy(&o.stderr).to_string();
        let resolved = yaml(&exp.join("results/config.yaml"));
        let load = &resolved["load"];
        let sp = &resolved["data"]["shared_prefix"];
        let ip = &run["workload"]["inference_perf"];
        // The build between 0.2.0 and 0.3.0 that ran them: 0.2.0's semantics.
        assert_eq!(
            ip["client"].as_str(),
            Some("inference-perf 0.2.0"),
            "{name}"
        );
        let stages = ip["stages"].as_array().unwrap();
        let want = load["stages"].as_sequence().unwrap();
        assert_eq!(stages.len(), want.len(), "{name}");
        for (got, want) in stages.iter().zip(want) {
            let rate = got["rate"].as_float().unwrap();
            assert_eq!(rate, num(&want["rate"]), "{name}");
            assert_eq!(
                got["duration"].as_integer().unwrap() as f64,
                num(&want["duration"])
            );
        }
        for (key, from) in [
            ("interval", &load["interval"]),
            ("num_workers", &load["num_workers"]),
            ("worker_max_concurrency", &load["worker_max_concurrency"]),
        ] {
            let got = ip[key]
                .as_float()
                .or_else(|| ip[key].as_integer().map(|i| i as f64))
                .unwrap_or_else(|| panic!("{name}: no {key}"));
            assert_eq!(got, num(from), "{name}: {key}");
        }
        // request_timeout: null, so aiohttp's 300 s — not written, noted.
        assert!(load["request_timeout"].is_null());
        assert!(ip.get("request_timeout").is_none(), "{name}");
        assert!(
            notes.contains("aiohttp's default total timeout of 300 s"),
            "{name}"
        );
        let t = &ip["shared_prefix"];
        for (key, from) in [
            ("num_unique_system_prompts", "num_groups"),
            ("num_users_per_system_prompt", "num_prompts_per_group"),
            ("system_prompt_len", "system_prompt_len"),
            ("question_len", "question_len"),
            ("output_len", "output_len"),
        ] {
            assert_eq!(
                t[key].as_integer().unwrap() as f64,
                num(&sp[from]),
                "{name}: {key}"
            );
        }
        assert_eq!(t["enable_multi_turn_chat"].as_bool(), Some(false), "{name}");
        // The deployment.
        let exp_cfg = yaml(&exp.join("exp-config.yaml"));
        assert_eq!(
            run["model"]["name"].as_str(),
            exp_cfg["model"].as_str(),
            "{name}"
        );
        assert_eq!(
            run["model"]["tp"].as_integer().unwrap() as f64,
            num(&exp_cfg["tensor_parallelism"])
        );
        for key in ["max_num_seqs", "max_num_batched_tokens"] {
            assert_eq!(
                run["instance"][key].as_integer().unwrap() as f64,
                num(&exp_cfg[key])
            );
        }
        // Each profile asked for multi-turn chat with its own prompt and
        // user counts; the client did not know those keys.
        let profile = yaml(&exp.join("profile.yaml"));
        let psp = &profile["data"]["shared_prefix"];
        if psp["enable_multi_turn_chat"].as_bool() == Some(true) {
            assert!(
                notes.contains("profile.yaml asked data.shared_prefix.enable_multi_turn_chat = true; the client's resolved config has no such key"),
                "{name}: {notes}"
            );
        }
        if psp["num_unique_system_prompts"].as_f64() != sp["num_groups"].as_f64() {
            assert!(
                notes.contains("data.shared_prefix.num_unique_system_prompts"),
                "{name}"
            );
        }
    }
}

#[test]
fn the_generated_faithful_and_profile_run_files_are_valid() {
    let dir = TestDir::new("inference_perf_runs_validate");
    for set in ["faithful", "profile"] {
        let mut n = 0;
        for e in std::fs::read_dir(runs_dir().join(set)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "toml") {
                continue;
            }
            n += 1;
            let o = dir.blis().arg("validate").arg(&p).output().unwrap();
            assert!(
                o.status.success(),
                "{}: {}",
                p.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            let text = std::fs::read_to_string(&p).unwrap();
            let want = if set == "faithful" {
                "client = \"inference-perf 0.2.0\""
            } else {
                "client = \"reference\""
            };
            assert!(text.contains(want), "{}", p.display());
        }
        assert_eq!(n, 16, "{set}");
    }
}
