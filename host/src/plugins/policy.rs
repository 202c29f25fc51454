//! Host-side handles of plugin policies: every call goes through the ABI and
//! every result is checked before the simulator uses it.

use abi_stable::std_types::{RResult, RVec};
use blis_plugin_api::{AdmissionBox, ClusterView, PolicyError, RequestView, RouterBox, ScorerBox};

use super::PluginError;

/// Which policy of which library (for messages and traces).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyLabel {
    pub library: String,
    pub kind: &'static str,
    pub name: String,
}

impl PolicyLabel {
    fn fail(&self, call: &'static str, request: u64, e: PolicyError) -> Box<PluginError> {
        if e.panicked {
            Box::new(PluginError::Panicked {
                library: self.library.clone(),
                kind: self.kind,
                name: self.name.clone(),
                call,
                request,
                message: e.message.to_string(),
            })
        } else {
            self.bad(call, request, format!("returned an error: {}", e.message))
        }
    }

    fn bad(&self, call: &'static str, request: u64, problem: String) -> Box<PluginError> {
        Box::new(PluginError::BadOutput {
            library: self.library.clone(),
            kind: self.kind,
            name: self.name.clone(),
            call,
            request,
            problem,
        })
    }
}

fn check<T>(
    label: &PolicyLabel,
    call: &'static str,
    request: u64,
    r: RResult<T, PolicyError>,
) -> Result<T, Box<PluginError>> {
    match r {
        RResult::ROk(v) => Ok(v),
        RResult::RErr(e) => Err(label.fail(call, request, e)),
    }
}

/// An admission policy created by a plugin library.
pub struct AdmissionPolicy {
    label: PolicyLabel,
    obj: AdmissionBox,
}

impl AdmissionPolicy {
    pub(super) fn new(label: PolicyLabel, obj: AdmissionBox) -> Self {
        Self { label, obj }
    }

    /// Which policy this is.
    pub fn label(&self) -> &PolicyLabel {
        &self.label
    }

    /// Admit (true) or reject (false) the request.
    #[inline]
    pub fn admit(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> Result<bool, Box<PluginError>> {
        let r = self.obj.admit(req, cluster);
        check(&self.label, "admit", req.id, r)
    }

    /// Tell the policy where an admitted request was routed.
    #[inline]
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        let r = self.obj.observe(req, cluster, chosen);
        check(&self.label, "observe", req.id, r)
    }
}

/// A routing policy created by a plugin library.
pub struct RouterPolicy {
    label: PolicyLabel,
    obj: RouterBox,
}

impl RouterPolicy {
    pub(super) fn new(label: PolicyLabel, obj: RouterBox) -> Self {
        Self { label, obj }
    }

    /// Which policy this is.
    pub fn label(&self) -> &PolicyLabel {
        &self.label
    }

    /// The chosen instance, checked to be in range.
    #[inline]
    pub fn route(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> Result<u32, Box<PluginError>> {
        let r = self.obj.route(req, cluster);
        let i = check(&self.label, "route", req.id, r)?;
        if (i as usize) < cluster.len() {
            Ok(i)
        } else {
            let shown = if i == u32::MAX {
                "an index beyond u32".to_string()
            } else {
                i.to_string()
            };
            Err(self.label.bad(
                "route",
                req.id,
                format!(
                    "chose instance {shown}, but the cluster has {} instances (valid: 0..{})",
                    cluster.len(),
                    cluster.len().saturating_sub(1)
                ),
            ))
        }
    }

    /// Tell the policy where the request was routed.
    #[inline]
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        let r = self.obj.observe(req, cluster, chosen);
        check(&self.label, "observe", req.id, r)
    }
}

/// A scorer created by a plugin library, with its reusable score buffer.
pub struct ScorerPolicy {
    label: PolicyLabel,
    obj: ScorerBox,
    buf: RVec<f64>,
}

impl ScorerPolicy {
    pub(super) fn new(label: PolicyLabel, obj: ScorerBox) -> Self {
        Self {
            label,
            obj,
            buf: RVec::new(),
        }
    }

    /// Which policy this is.
    pub fn label(&self) -> &PolicyLabel {
        &self.label
    }

    /// One score per instance, checked (count, finiteness) and clamped to [0, 1].
    #[inline]
    pub fn score(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
    ) -> Result<&[f64], Box<PluginError>> {
        self.buf.clear();
        let r = self.obj.score(req, cluster, &mut self.buf);
        check(&self.label, "score", req.id, r)?;
        let n = cluster.len();
        if self.buf.len() != n {
            return Err(self.label.bad(
                "score",
                req.id,
                format!(
                    "returned {} scores for {n} instances; a scorer must push exactly one score per instance",
                    self.buf.len()
                ),
            ));
        }
        for (i, s) in self.buf.iter_mut().enumerate() {
            if !s.is_finite() {
                let v = *s;
                return Err(self.label.bad(
                    "score",
                    req.id,
                    format!(
                        "returned {v} for instance {i}; scores must be finite numbers in [0, 1]"
                    ),
                ));
            }
            *s = s.clamp(0.0, 1.0);
        }
        Ok(self.buf.as_slice())
    }

    /// Tell the scorer where the request was routed.
    #[inline]
    pub fn observe(
        &mut self,
        req: &RequestView<'_>,
        cluster: &ClusterView<'_>,
        chosen: u32,
    ) -> Result<(), Box<PluginError>> {
        let r = self.obj.observe(req, cluster, chosen);
        check(&self.label, "observe", req.id, r)
    }
}
