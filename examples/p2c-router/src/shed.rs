//! The `shed-sheddable` admission policy: when the cluster is saturated,
//! turn away the traffic that agreed to be turned away.
//!
//! Why: the standard admission policies are blind to service classes.
//! `token-bucket` limits every class alike, so critical requests are rejected
//! as readily as background ones. Under overload, the useful behaviour is to
//! keep admitting critical and standard requests and to shed the classes
//! with negative priority (batch, sheddable, background). This policy does
//! exactly that, based on the mean effective load per instance.

use blis_plugin_api::{Admission, ClusterView, Params, PolicyDef, RequestView};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShedParams {
    max_load_per_instance: Option<f64>,
}

/// Rejects requests of sheddable classes (`SloClass::is_sheddable`: batch,
/// sheddable, background) while the mean effective load per instance is at
/// least `max_load_per_instance`; admits every other request.
#[derive(Clone, Debug)]
pub struct ShedSheddable {
    max_load_per_instance: f64,
}

impl PolicyDef for ShedSheddable {
    const NAME: &'static str = "shed-sheddable";
    const SUMMARY: &'static str =
        "reject sheddable classes while mean load per instance ≥ max_load_per_instance";
    const PARAMS_DOC: &'static str = "\
max_load_per_instance  (float > 0, requests per instance, required)  the
        cluster is saturated when the mean effective load per instance
        (queue_depth + batch_size + pending_requests, summed over all
        instances, divided by their number) is at least this.
While the cluster is saturated, requests of sheddable classes (batch,
sheddable, background: negative priority) are rejected. Critical and
standard requests are always admitted.";

    fn create(params: Params<'_>, _seed: u64) -> Result<Self, String> {
        let p: ShedParams = params.parse()?;
        let max = p.max_load_per_instance.ok_or(
            "params.max_load_per_instance is required: the mean effective load per instance \
             (requests) at which sheddable classes are rejected, e.g. `max_load_per_instance = 64.0`",
        )?;
        if !(max.is_finite() && max > 0.0) {
            return Err(format!(
                "params.max_load_per_instance = {max}: must be a finite number > 0"
            ));
        }
        Ok(ShedSheddable {
            max_load_per_instance: max,
        })
    }
}

impl ShedSheddable {
    /// True when the mean effective load per instance reaches the threshold.
    fn saturated(&self, cluster: &ClusterView<'_>) -> bool {
        let n = cluster.len();
        if n == 0 {
            return false;
        }
        let total: u64 = cluster.instances().iter().map(|s| s.effective_load()).sum();
        total as f64 >= self.max_load_per_instance * n as f64
    }
}

impl Admission for ShedSheddable {
    fn admit(&mut self, request: &RequestView<'_>, cluster: &ClusterView<'_>) -> bool {
        !(request.slo_class.is_sheddable() && self.saturated(cluster))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{cluster, queued, request};
    use blis_plugin_api::{InstanceSnapshot, SloClass};

    /// `PARAMS_DOC` documents exactly the keys of the params struct.
    #[test]
    fn params_doc_matches_the_params_struct() {
        blis_plugin_api::check_params_doc::<ShedParams>(ShedSheddable::PARAMS_DOC).unwrap();
    }

    const CLASSES: [SloClass; 5] = [
        SloClass::CRITICAL,
        SloClass::STANDARD,
        SloClass::BATCH,
        SloClass::SHEDDABLE,
        SloClass::BACKGROUND,
    ];

    fn shed(max: &str) -> ShedSheddable {
        ShedSheddable::create(Params::new(&format!("max_load_per_instance = {max}")), 0).unwrap()
    }

    fn admitted(p: &mut ShedSheddable, loads: &[InstanceSnapshot]) -> Vec<bool> {
        CLASSES
            .iter()
            .map(|&c| p.admit(&request(0, c), &cluster(loads)))
            .collect()
    }

    #[test]
    fn saturated_cluster_sheds_only_sheddable_classes() {
        let mut p = shed("4.0");
        // Loads 3 + 5 + 4 = 12 over 3 instances: mean 4 ≥ 4 → saturated.
        let full = [queued(3), queued(5), queued(4)];
        assert_eq!(
            admitted(&mut p, &full),
            vec![true, true, false, false, false] // critical, standard | batch, sheddable, background
        );
    }

    #[test]
    fn below_the_threshold_everyone_is_admitted() {
        let mut p = shed("4.0");
        // 3 + 5 + 3 = 11 over 3: mean 3.67 < 4.
        assert_eq!(
            admitted(&mut p, &[queued(3), queued(5), queued(3)]),
            vec![true; 5]
        );
        // The mean counts every part of the effective load: (1 + 2 + 1) + 4 = 8
        // over 2 instances = 4 → saturated.
        let parts = InstanceSnapshot {
            queue_depth: 1,
            batch_size: 2,
            pending_requests: 1,
            ..Default::default()
        };
        assert_eq!(
            admitted(&mut p, &[parts, queued(4)]),
            vec![true, true, false, false, false]
        );
        // A fractional threshold: mean 2.5 ≥ 2.5.
        let mut half = shed("2.5");
        assert_eq!(
            admitted(&mut half, &[queued(2), queued(3)]),
            vec![true, true, false, false, false]
        );
        assert_eq!(admitted(&mut half, &[queued(2), queued(2)]), vec![true; 5]);
    }

    #[test]
    fn bad_params_name_the_key() {
        for (params, needle) in [
            ("", "params.max_load_per_instance is required"),
            (
                "max_load_per_instance = 0.0",
                "params.max_load_per_instance = 0",
            ),
            (
                "max_load_per_instance = -3.0",
                "params.max_load_per_instance = -3",
            ),
            (
                "max_load_per_instance = inf",
                "params.max_load_per_instance = inf",
            ),
            (
                "max_load_per_instance = \"high\"",
                "params.max_load_per_instance:",
            ),
            ("max_load = 3.0", "max_load"),
        ] {
            match ShedSheddable::create(Params::new(params), 0) {
                Ok(_) => panic!("{params} accepted"),
                Err(e) => assert!(e.contains(needle), "{params}: {e}"),
            }
        }
    }
}
