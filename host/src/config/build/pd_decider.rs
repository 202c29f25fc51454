//! `pd.decider` (and `[pd.decider_params]`): a standard decider (`never`,
//! `always`, `prefix-threshold`, `multimodal`) or, for any other name, a plugin of kind
//! `decider`. Standard names win; a plugin name is resolved when the
//! plugins are loaded (phase 2), with errors that list both sets and say
//! when the name belongs to a policy of another kind.

use super::policies::params_text;
use super::{derive_seed, Problems};
use crate::cluster::pd::{Decider, PdDecider};
use crate::config::PdSection;
use crate::plugins::registry::closest;
use crate::plugins::{PluginError, Registry};

/// The standard deciders' names.
pub(super) const STANDARD: [&str; 4] = ["never", "always", "prefix-threshold", "multimodal"];

/// What `pd.decider` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum DeciderSpec {
    Standard(Decider),
    /// A plugin, by the name in `pd.decider` (created in phase 2).
    Plugin,
}

impl DeciderSpec {
    /// True unless the decider is `never` (a plugin may disaggregate).
    pub(super) fn may_disaggregate(self) -> bool {
        self != DeciderSpec::Standard(Decider::Never)
    }
}

/// Check `pd.decider`, `pd.prefix_threshold` and `pd.decider_params`.
pub(super) fn check(pd: &PdSection, problems: &mut Problems) -> DeciderSpec {
    let spec = match pd.decider.as_str() {
        "never" => DeciderSpec::Standard(Decider::Never),
        "always" => DeciderSpec::Standard(Decider::Always),
        "multimodal" => DeciderSpec::Standard(Decider::Multimodal),
        "prefix-threshold" => match pd.prefix_threshold.unwrap_or(16) {
            t if t < 0 => {
                problems.error(format!("pd.prefix_threshold = {t}: must be ≥ 0 (tokens)"));
                DeciderSpec::Standard(Decider::Never)
            }
            t => DeciderSpec::Standard(Decider::PrefixThreshold(t.min(i64::from(u32::MAX)) as u32)),
        },
        "" => {
            problems.error(format!(
                "pd.decider is empty: give one of {} or the name of a decider plugin",
                STANDARD.join(", ")
            ));
            DeciderSpec::Standard(Decider::Never)
        }
        _ => DeciderSpec::Plugin,
    };
    for (key, v) in [
        ("prefix_min_prompt_tokens", pd.prefix_min_prompt_tokens),
        (
            "encode_prefix_min_prompt_tokens",
            pd.encode_prefix_min_prompt_tokens,
        ),
    ] {
        if let Some(v) = v.filter(|&v| !(0..=i64::from(u32::MAX)).contains(&v)) {
            problems.error(format!(
                "pd.{key} = {v}: must be an integer in [0, {}]",
                u32::MAX
            ));
        }
    }
    if pd.prefix_min_prompt_tokens.is_some() && pd.decider != "prefix-threshold" {
        problems.error(format!(
            "pd.prefix_min_prompt_tokens is given but pd.decider = \"{}\"; it is used only by decider = \"prefix-threshold\"",
            pd.decider
        ));
    }
    if pd.prefix_threshold.is_some() && pd.decider != "prefix-threshold" {
        problems.error(format!(
            "pd.prefix_threshold is given but pd.decider = \"{}\"; it is used only by decider = \"prefix-threshold\"",
            pd.decider
        ));
    }
    if !pd.decider_params.is_empty() && spec != DeciderSpec::Plugin {
        problems.error(format!(
            "[pd.decider_params] is given but pd.decider = \"{}\" is a standard decider; \
             decider_params are handed to a decider plugin only",
            pd.decider
        ));
    }
    spec
}

/// Create the decider: the standard one, or the plugin `pd.decider` with
/// `[pd.decider_params]`.
pub(super) fn create(
    spec: DeciderSpec,
    pd: &PdSection,
    registry: &Registry,
    run_seed: u64,
) -> Result<PdDecider, String> {
    let DeciderSpec::Standard(d) = spec else {
        let seed = derive_seed(run_seed, "pd/decider");
        return registry
            .decider(&pd.decider, &params_text(&pd.decider_params), seed)
            .map(|p| PdDecider::Plugin(Box::new(p)))
            .map_err(|e| plugin_error(&pd.decider, registry, e));
    };
    Ok(PdDecider::Standard(d))
}

/// A decider plugin that cannot be found or created, as a paragraph that
/// names the key and lists what `pd.decider` accepts.
fn plugin_error(name: &str, registry: &Registry, e: PluginError) -> String {
    if !matches!(e, PluginError::UnknownPolicy { .. }) {
        return format!("pd.decider = \"{name}\": {e}");
    }
    let plugins = registry.names(blis_plugin_api::KindCode::DECIDER);
    let bare = name.rsplit("::").next().unwrap_or(name);
    let others: Vec<String> = registry
        .find_any(name)
        .iter()
        .map(|(lib, p)| format!("a {} policy of library {}", p.kind.name(), lib.name))
        .collect();
    let available = format!(
        "standard deciders: {}; decider plugins: {}",
        STANDARD.join(", "),
        if plugins.is_empty() {
            "none loaded".to_string()
        } else {
            plugins.join(", ")
        }
    );
    if !others.is_empty() {
        return format!(
            "pd.decider = \"{name}\": '{bare}' is {}, not a decider.\n  Accepted: {available}.",
            others.join(" and ")
        );
    }
    let mut all: Vec<String> = STANDARD.iter().map(|s| s.to_string()).collect();
    all.extend(plugins);
    let suggestion = closest(bare, &all)
        .map(|s| format!(" (did you mean '{s}'?)"))
        .unwrap_or_default();
    format!(
        "pd.decider = \"{name}\": no standard decider or loaded decider plugin has this name{suggestion}.\n  \
         Accepted: {available}.\n  Load a decider plugin with --plugin PATH or [[plugins]] (see `blis plugins list`)."
    )
}
