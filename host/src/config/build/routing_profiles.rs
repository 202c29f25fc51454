//! The `pipeline` routing policy: `[[routing.profiles]]` (filters → weighted
//! scorers → picker, llm-d's scheduling profile) run by a profile handler:
//! `single-profile` (exactly one profile) or `header` (llm-d's
//! header-profile-handler: a workload client's requests run the profile
//! its request header names; the header is the client's, so the choice is
//! made here, per client, and the hot loop only indexes it). Weights are
//! llm-d's: raw (not normalised), ≥ 0, default 1. The picker defaults to
//! the standard `max-score` (ties to the lowest index).
//! Every policy gets its own seed, derived from the run seed and its place
//! in the profile.

use super::derive_seed;
use super::policies::params_text;
use crate::cluster::{ByClient, Pick, Profile, Routing};
use crate::config::{ProfileSection, RoutingSection};
use crate::plugins::Registry;
use crate::workload::ClientSpec;

/// The profile handlers blis implements.
pub const PROFILE_HANDLERS: &[&str] = &["single-profile", "header"];

/// The default request header of the `header` handler (llm-d's).
const DEFAULT_HEADER: &str = "EPP-Profile";

/// Check the `[routing]` keys of the `pipeline` policy (and that profiles
/// are not given to another policy). Returns every problem found.
pub(super) fn check(routing: &RoutingSection) -> Vec<String> {
    let mut errors = Vec::new();
    let pipeline = routing.policy == "pipeline";
    if !pipeline {
        if !routing.profiles.is_empty() {
            errors.push(format!(
                "routing.profiles is given but routing.policy = \"{}\"; profiles are used only by policy = \"pipeline\"",
                routing.policy
            ));
        }
        for (key, given) in [
            ("profile_handler", routing.profile_handler.is_some()),
            ("header", routing.header.is_some()),
            ("default_profile", routing.default_profile.is_some()),
        ] {
            if given {
                errors.push(format!(
                    "routing.{key} is given but routing.policy = \"{}\"; it is used only by policy = \"pipeline\"",
                    routing.policy
                ));
            }
        }
        return errors;
    }
    if !routing.scorers.is_empty() {
        errors.push("routing.scorers is given but routing.policy = \"pipeline\"; list the scorers of each profile in [[routing.profiles]] (scorers = [{ name, weight }])".into());
    }
    if !routing.params.is_empty() {
        errors.push("routing.params is given but routing.policy = \"pipeline\"; give each filter, scorer and picker its own params".into());
    }
    if let Some(h) = &routing.profile_handler {
        if !PROFILE_HANDLERS.contains(&h.as_str()) {
            errors.push(format!(
                "routing.profile_handler = \"{h}\" is not valid; accepted values: {}",
                PROFILE_HANDLERS.join(", ")
            ));
        }
    }
    let header = routing.profile_handler.as_deref() == Some("header");
    match routing.profiles.len() {
        0 => errors.push("routing.policy = \"pipeline\" needs one [[routing.profiles]] (filters, scorers, picker)".into()),
        1 => {}
        n if !header => errors.push(format!(
            "routing.profiles: {n} profiles given, but the single-profile handler runs exactly one (profile_handler = \"header\" chooses one per request by a request header)"
        )),
        _ => {}
    }
    if !header {
        for (key, given) in [
            ("header", routing.header.is_some()),
            ("default_profile", routing.default_profile.is_some()),
        ] {
            if given {
                errors.push(format!(
                    "routing.{key} is given but routing.profile_handler is not \"header\"; it is used only by the header handler"
                ));
            }
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for p in &routing.profiles {
        if !names.insert(p.name.as_str()) {
            errors.push(format!(
                "routing.profiles: two profiles are named '{}'; give each its own name",
                p.name
            ));
        }
    }
    if let Some(d) = &routing.default_profile {
        if !d.is_empty() && !names.contains(d.as_str()) {
            errors.push(format!(
                "routing.default_profile = \"{d}\" names no profile; profiles: {}",
                names.iter().copied().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    for p in &routing.profiles {
        for s in &p.scorers {
            if !(s.weight.is_finite() && s.weight >= 0.0) {
                errors.push(format!(
                    "routing.profiles '{}': weight {} of scorer '{}' must be a finite number ≥ 0",
                    p.name, s.weight, s.name
                ));
            }
        }
    }
    errors
}

/// Create the routing of the (checked) `pipeline` section. `clients`: the
/// workload's `[[workload.clients]]` (empty when the workload has none:
/// every request is then a header-less one), or `None` for a P/D stage's
/// routing, which the `header` handler cannot serve.
pub(super) fn create(
    routing: &RoutingSection,
    registry: &Registry,
    seed: u64,
    clients: Option<&[ClientSpec]>,
) -> Result<Routing, String> {
    let first = routing
        .profiles
        .first()
        .ok_or("routing.policy = \"pipeline\" needs one [[routing.profiles]]")?;
    if routing.profile_handler.as_deref() != Some("header") {
        return Ok(Routing::Profile(Box::new(profile(first, registry, seed)?)));
    }
    let Some(clients) = clients else {
        return Err("routing.profile_handler = \"header\" chooses a profile per request, but a P/D stage (pd.prefill_routing, pd.decode_routing, or [routing] routing a stage) runs one; use single-profile routing with [[pools]]".into());
    };
    let profiles = routing
        .profiles
        .iter()
        .map(|p| profile(p, registry, seed))
        .collect::<Result<Vec<_>, _>>()?;
    let (of_client, default) = choose(routing, clients)?;
    Ok(Routing::ByClient(Box::new(ByClient::new(
        profiles, of_client, default,
    ))))
}

/// The `header` handler's choice: each client's profile (by its header,
/// else the default), and the default's index (for requests of clients
/// beyond the list: a preset's or a trace's).
fn choose(routing: &RoutingSection, clients: &[ClientSpec]) -> Result<(Vec<u32>, u32), String> {
    let header = routing.header.as_deref().unwrap_or(DEFAULT_HEADER);
    let names: Vec<&str> = routing.profiles.iter().map(|p| p.name.as_str()).collect();
    let index = |name: &str| names.iter().position(|n| *n == name).map(|i| i as u32);
    // `Some("")`: no default, requests without the header are refused
    // (llm-d's 429), so a workload that would send one is refused here.
    let default = match routing.default_profile.as_deref() {
        None => Some(0),
        Some("") => None,
        Some(d) => Some(index(d).expect("checked")),
    };
    let no_default = |who: String| {
        format!(
            "{who} sends no {header} header, and routing.default_profile = \"\" (llm-d's defaultProfile names no profile): llm-d would refuse every such request (429). Give the client headers = {{ \"{header}\" = \"…\" }} naming one of {}, or set routing.default_profile",
            names.join(", ")
        )
    };
    if default.is_none() && clients.is_empty() && names.len() > 1 {
        return Err(no_default(
            "the workload (not [[workload.clients]]: a preset or a trace)".into(),
        ));
    }
    let of_client = clients
        .iter()
        .map(|c| {
            let value = c
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(header))
                .map(|(_, v)| v.as_str());
            match value {
                // llm-d: one profile runs whatever the header says.
                _ if names.len() == 1 => Ok(0),
                None => default.ok_or_else(|| no_default(format!("workload client '{}'", c.id))),
                Some(v) => index(v).ok_or_else(|| {
                    format!(
                        "workload client '{}': header {header} = \"{v}\" names no profile of [[routing.profiles]] ({}); llm-d's header-profile-handler would refuse every such request (429). Name one of them, or remove the header to run routing.default_profile",
                        c.id,
                        names.join(", ")
                    )
                }),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((of_client, default.unwrap_or(0)))
}

/// One profile's policies.
fn profile(p: &ProfileSection, registry: &Registry, seed: u64) -> Result<Profile, String> {
    let at = |kind: &str, i: usize, name: &str| {
        derive_seed(seed, &format!("profile/{}/{kind}/{i}/{name}", p.name))
    };
    let mut filters = Vec::new();
    for (i, f) in p.filters.iter().enumerate() {
        filters.push(
            registry
                .filter(&f.name, &params_text(&f.params), at("filter", i, &f.name))
                .map_err(|e| e.to_string())?,
        );
    }
    let mut scorers = Vec::new();
    for (i, s) in p.scorers.iter().enumerate() {
        let scorer = registry
            .scorer(&s.name, &params_text(&s.params), at("scorer", i, &s.name))
            .map_err(|e| e.to_string())?;
        scorers.push((scorer, s.weight));
    }
    let (name, params) = match &p.picker {
        Some(pk) => (pk.name.as_str(), params_text(&pk.params)),
        None => ("max-score", String::new()),
    };
    let picker = registry
        .picker(name, &params, at("picker", 0, name))
        .map_err(|e| e.to_string())?;
    Ok(Profile::new(
        p.name.clone(),
        filters,
        scorers,
        Pick::Plugin(picker),
        false,
    ))
}
