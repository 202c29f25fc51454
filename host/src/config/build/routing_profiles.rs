//! The `pipeline` routing policy: `[[routing.profiles]]` (filters → weighted
//! scorers → picker, llm-d's scheduling profile) run by a profile handler.
//!
//! Only the `single-profile` handler exists, so exactly one profile is
//! allowed. Weights are llm-d's: raw (not normalised), ≥ 0, default 1. The
//! picker defaults to the standard `max-score` (ties to the lowest index).
//! Every policy gets its own seed, derived from the run seed and its place
//! in the profile.

use super::derive_seed;
use super::policies::params_text;
use crate::cluster::{Pick, Profile, Routing};
use crate::config::RoutingSection;
use crate::plugins::Registry;

/// The profile handlers blis implements.
pub const PROFILE_HANDLERS: &[&str] = &["single-profile"];

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
        if routing.profile_handler.is_some() {
            errors.push(format!(
                "routing.profile_handler is given but routing.policy = \"{}\"; it is used only by policy = \"pipeline\"",
                routing.policy
            ));
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
    match routing.profiles.len() {
        0 => errors.push("routing.policy = \"pipeline\" needs one [[routing.profiles]] (filters, scorers, picker)".into()),
        1 => {}
        n => errors.push(format!(
            "routing.profiles: {n} profiles given, but the single-profile handler runs exactly one"
        )),
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

/// Create the policies of the (checked) single profile.
pub(super) fn create(
    routing: &RoutingSection,
    registry: &Registry,
    seed: u64,
) -> Result<Routing, String> {
    let p = routing
        .profiles
        .first()
        .ok_or("routing.policy = \"pipeline\" needs one [[routing.profiles]]")?;
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
    Ok(Routing::Profile(Box::new(Profile::new(
        p.name.clone(),
        filters,
        scorers,
        Pick::Plugin(picker),
        false,
    ))))
}
