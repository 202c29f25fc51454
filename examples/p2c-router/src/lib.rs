//! # blis-p2c-router — power-of-two-choices routing and SLO-aware shedding
//!
//! A blis plugin library offering two policies that the standard library
//! lacks:
//!
//! * router `p2c` ([`p2c::PowerOfChoices`]): sample `choices` distinct
//!   instances (default 2) with the policy's own seeded generator, and route
//!   to the least loaded of them. It sits between random routing and
//!   `least-loaded`, the way large real balancers work.
//! * admission `shed-sheddable` ([`shed::ShedSheddable`]): while the mean
//!   effective load per instance is at least a threshold, reject requests of
//!   sheddable classes and keep admitting critical and standard ones.
//!
//! Like any third-party plugin, the crate depends only on `blis-plugin-api`
//! (and serde for parameters). It builds as `cdylib`
//! (`libblis_p2c_router.so`, loaded with `blis --plugin`) and as `rlib`. Its
//! only randomness is [`rng::SplitMix64`], seeded from the seed blis passes
//! to `create`, so a run stays reproducible.

pub mod p2c;
pub mod rng;
pub mod shed;

blis_plugin_api::export_plugin! {
    library: "p2c-router",
    admission: [shed::ShedSheddable],
    routers: [p2c::PowerOfChoices],
    scorers: [],
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Hand-built views for the unit tests.

    use blis_plugin_api::abi_stable::std_types::{RSlice, RStr};
    use blis_plugin_api::{ClusterView, InstanceSnapshot, RequestView, SloClass};

    /// An instance whose effective load is `load` queued requests.
    pub fn queued(load: u32) -> InstanceSnapshot {
        InstanceSnapshot {
            queue_depth: load,
            ..Default::default()
        }
    }

    pub fn cluster(snaps: &[InstanceSnapshot]) -> ClusterView<'_> {
        ClusterView {
            clock_us: 0,
            instances: RSlice::from_slice(snaps),
        }
    }

    pub fn request(id: u64, class: SloClass) -> RequestView<'static> {
        RequestView {
            id,
            arrival_us: 0,
            input_tokens: 64,
            slo_class: class,
            tenant: RStr::from(""),
            block_hashes: RSlice::from_slice(&[]),
        }
    }
}

#[cfg(test)]
mod tests {
    use blis_plugin_api::abi_stable::std_types::RStr;
    use blis_plugin_api::PolicyKind;

    /// The library as blis sees it: described, then created by kind and name.
    #[test]
    fn exported_through_the_plugin_abi() {
        let module = super::blis_plugin_module();
        let info = (module.describe())();
        assert_eq!(info.name.as_str(), "p2c-router");
        let listed: Vec<(PolicyKind, &str)> = info
            .policies
            .iter()
            .map(|p| (p.kind, p.name.as_str()))
            .collect();
        assert_eq!(
            listed,
            vec![
                (PolicyKind::Admission, "shed-sheddable"),
                (PolicyKind::Router, "p2c"),
            ]
        );
        let create = |kind, name: &str, params: &str| {
            (module.create())(kind, RStr::from(name), RStr::from(params), 1).into_result()
        };
        assert!(create(PolicyKind::Router, "p2c", "").is_ok());
        assert!(create(PolicyKind::Router, "p2c", "choices = 3\n").is_ok());
        assert!(create(
            PolicyKind::Admission,
            "shed-sheddable",
            "max_load_per_instance = 8.0\n"
        )
        .is_ok());
        match create(PolicyKind::Admission, "shed-sheddable", "") {
            Ok(_) => panic!("missing max_load_per_instance accepted"),
            Err(e) => assert!(e.contains("max_load_per_instance"), "{e}"),
        }
    }
}

#[cfg(test)]
mod readme {
    /// The README shows `p2c.toml` in full; this keeps the two identical.
    #[test]
    fn readme_embeds_the_run_file_verbatim() {
        let readme = include_str!("../README.md");
        let run_file = include_str!("../p2c.toml");
        assert!(
            readme.contains(&format!("```toml\n{run_file}```")),
            "README.md must contain p2c.toml verbatim in a ```toml block"
        );
    }
}
