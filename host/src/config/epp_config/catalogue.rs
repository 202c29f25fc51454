//! Every plugin type the llm-d Router registers (llm-d-router.md §2, at
//! ebab687): the hooks it implements, its stability and the parameter keys
//! its factory accepts. Facts about llm-d only; what blis makes of a type
//! is decided in `routing.rs` and `sections.rs`.

/// Hooks a plugin type implements (a type may implement several).
pub mod kind {
    pub const FILTER: u32 = 1;
    pub const SCORER: u32 = 1 << 1;
    pub const PICKER: u32 = 1 << 2;
    pub const HANDLER: u32 = 1 << 3;
    pub const DECIDER: u32 = 1 << 4;
    pub const PRODUCER: u32 = 1 << 5;
    pub const ADMITTER: u32 = 1 << 6;
    pub const PARSER: u32 = 1 << 7;
    pub const SOURCE: u32 = 1 << 8;
    pub const EXTRACTOR: u32 = 1 << 9;
    pub const DISCOVERY: u32 = 1 << 10;
    pub const FAIRNESS: u32 = 1 << 11;
    pub const ORDERING: u32 = 1 << 12;
    pub const USAGE_LIMIT: u32 = 1 << 13;
    pub const DETECTOR: u32 = 1 << 14;
    /// Request-control hooks without a scheduling slot (screeners, header
    /// processors, PreRequest/response hooks, eviction internals).
    pub const REQUEST_CONTROL: u32 = 1 << 15;
}

/// The parameter keys a factory accepts.
#[derive(Clone, Copy, Debug)]
pub enum Keys {
    /// The factory ignores its parameters (llm-d accepts anything).
    Any,
    /// Exactly these top-level keys (strict decoding: another key fails the
    /// load with `unknown field`).
    Only(&'static [&'static str]),
    /// No parameters at all (non-empty parameters are rejected).
    Empty,
}

/// One registered plugin type.
#[derive(Clone, Copy, Debug)]
pub struct TypeInfo {
    pub ty: &'static str,
    pub kinds: u32,
    /// Alpha: needs `--allow-experimental-plugins` in llm-d.
    pub alpha: bool,
    /// Registered as deprecated (llm-d logs a warning): the replacement.
    pub deprecated: Option<&'static str>,
    pub keys: Keys,
}

use kind::*;
use Keys::{Any, Empty, Only};

const fn t(ty: &'static str, kinds: u32, keys: Keys) -> TypeInfo {
    TypeInfo {
        ty,
        kinds,
        alpha: false,
        deprecated: None,
        keys,
    }
}
const fn alpha(ty: &'static str, kinds: u32, keys: Keys) -> TypeInfo {
    TypeInfo {
        ty,
        kinds,
        alpha: true,
        deprecated: None,
        keys,
    }
}
const fn dep(ty: &'static str, kinds: u32, keys: Keys, by: &'static str) -> TypeInfo {
    TypeInfo {
        ty,
        kinds,
        alpha: false,
        deprecated: Some(by),
        keys,
    }
}

const SESSION_KEYS: &[&str] = &[
    "strategy",
    "encodedEndpointHeaderConfig",
    "sessionIdConfig",
    "profileName",
];
const PICKER_KEYS: &[&str] = &["maxNumOfEndpoints"];

/// The registry (llm-d-router.md §2.4–2.12). Where the spec does not give a
/// factory's complete parameter list, the type takes [`Keys::Any`]: blis is
/// never stricter than llm-d.
pub const TYPES: &[TypeInfo] = &[
    // ---- filters (§2.4) ----
    t("decode-filter", FILTER, Any),
    t("prefill-filter", FILTER, Any),
    t("encode-filter", FILTER, Any),
    t(
        "label-selector-filter",
        FILTER,
        Only(&["matchLabels", "matchExpressions"]),
    ),
    dep(
        "by-label-selector",
        FILTER,
        Only(&["matchLabels", "matchExpressions"]),
        "label-selector-filter",
    ),
    dep(
        "by-label",
        FILTER,
        Only(&["label", "validValues", "allowsNoLabel"]),
        "label-selector-filter",
    ),
    alpha(
        "utilization-filter",
        FILTER,
        Only(&["conditions", "fallbackOnEmpty", "inFlightLoadProducerName"]),
    ),
    alpha(
        "endpoint-attribute-filter",
        FILTER,
        Only(&[
            "attribute",
            "producer",
            "onMissing",
            "fallbackOnEmpty",
            "algorithm",
        ]),
    ),
    alpha("session-affinity-filter", FILTER, Only(SESSION_KEYS)),
    alpha("topology-affinity-filter", FILTER, Only(&["minAffinity"])),
    t("prefix-cache-affinity-filter", FILTER, Any),
    t("slo-headroom-tier-filter", FILTER, Any),
    t(
        "context-length-aware",
        FILTER | SCORER,
        Only(&["label", "enableFiltering"]),
    ),
    // ---- saturation detectors, also filters (§4.4) ----
    t(
        "utilization-detector",
        DETECTOR | FILTER,
        Only(&[
            "queueDepthThreshold",
            "kvCacheUtilThreshold",
            "metricsStalenessThreshold",
            "headroom",
        ]),
    ),
    t(
        "concurrency-detector",
        DETECTOR | FILTER,
        Only(&[
            "concurrencyMode",
            "maxConcurrency",
            "maxTokenConcurrency",
            "headroom",
            "inFlightLoadProducerName",
        ]),
    ),
    // ---- scorers (§2.5) ----
    t("queue-scorer", SCORER, Any),
    t("kv-cache-utilization-scorer", SCORER, Any),
    t("running-requests-size-scorer", SCORER, Any),
    t("load-aware-scorer", SCORER, Only(&["threshold"])),
    t(
        "active-request-scorer",
        SCORER,
        Only(&[
            "idleThreshold",
            "maxBusyScore",
            "requestTimeout",
            "inFlightLoadProducerName",
        ]),
    ),
    t(
        "token-load-scorer",
        SCORER,
        Only(&["queueThresholdTokens", "inFlightLoadProducerName"]),
    ),
    t(
        "prefix-cache-scorer",
        SCORER,
        Only(&[
            "prefixMatchInfoProducerName",
            "matchLengthWeight",
            "matchLengthScaleTokens",
        ]),
    ),
    t(
        "no-hit-lru-scorer",
        SCORER,
        Only(&[
            "lruSize",
            "prefixMatchInfoProducerName",
            "prefixPluginType",
            "prefixPluginName",
        ]),
    ),
    t("lora-affinity-scorer", SCORER, Any),
    alpha("session-affinity-scorer", SCORER, Only(SESSION_KEYS)),
    alpha(
        "header-label-affinity-scorer",
        SCORER,
        Only(&["headerName", "labelKey"]),
    ),
    alpha(
        "endpoint-attribute-scorer",
        SCORER,
        Only(&["attributeKey", "producer", "algorithm"]),
    ),
    alpha("topology-affinity-scorer", SCORER, Any),
    t("mm-embeddings-cache-scorer", SCORER, Any),
    t("latency-scorer", SCORER, Any),
    t("precise-prefix-cache-scorer", SCORER, Any),
    // ---- pickers (§2.6) ----
    t("max-score-picker", PICKER, Only(PICKER_KEYS)),
    t("random-picker", PICKER, Only(PICKER_KEYS)),
    t("weighted-random-picker", PICKER, Only(PICKER_KEYS)),
    // ---- profile handlers and deciders (§3) ----
    t("single-profile-handler", HANDLER, Any),
    t(
        "disagg-profile-handler",
        HANDLER,
        Only(&[
            "profiles",
            "deciders",
            "stageOrder",
            "decodeProfile",
            "prefillProfile",
            "encodeProfile",
            "prefillDeciderPluginName",
            "encodeDeciderPluginName",
            "deciderPluginName",
        ]),
    ),
    dep(
        "pd-profile-handler",
        HANDLER,
        Only(&[
            "decodeProfile",
            "prefillProfile",
            "prefixPluginType",
            "prefixPluginName",
            "primaryPort",
            "deciderPluginName",
            "prefixMatchInfoProducerName",
        ]),
        "disagg-profile-handler",
    ),
    t(
        "data-parallel-profile-handler",
        HANDLER,
        Only(&["primaryPort"]),
    ),
    alpha(
        "header-profile-handler",
        HANDLER,
        Only(&["headerName", "defaultProfile"]),
    ),
    t(
        "prefix-based-pd-decider",
        DECIDER,
        Only(&["nonCachedTokens", "promptTokens"]),
    ),
    t("always-disagg-pd-decider", DECIDER, Any),
    t("always-disagg-multimodal-decider", DECIDER, Any),
    // ---- data producers (§2.8) ----
    t("token-producer", PRODUCER, Any),
    dep("tokenizer", PRODUCER, Any, "token-producer"),
    t(
        "approx-prefix-cache-producer",
        PRODUCER,
        Only(&[
            "autoTune",
            "blockSizeTokens",
            "maxPrefixTokensToMatch",
            "maxPrefixBlocksToMatch",
            "lruCapacityPerServer",
            "blockSize",
        ]),
    ),
    t(
        "precise-prefix-cache-producer",
        PRODUCER | EXTRACTOR,
        Only(&[
            "tokenProcessorConfig",
            "indexerConfig",
            "kvEventsConfig",
            "speculativeIndexing",
            "speculativeTTL",
        ]),
    ),
    alpha(
        "burst-prefix-cache-producer",
        PRODUCER,
        Only(&[
            "windowDurationMs",
            "maxPerReplica",
            "blockSizeTokens",
            "minColocateBlocks",
            "maxBatchSize",
            "balanceBy",
        ]),
    ),
    t(
        "inflight-load-producer",
        PRODUCER | EXTRACTOR,
        Only(&[
            "addEstimatedOutputTokens",
            "outputRatio",
            "maxEstimatedOutputTokens",
            "prefixMatchInfoProducerName",
            "syncCrossReplicaState",
        ]),
    ),
    t("predicted-latency-producer", PRODUCER, Any),
    t(
        "mm-embeddings-cache-producer",
        PRODUCER | EXTRACTOR,
        Only(&["cacheSizeInMBPerServer"]),
    ),
    t(
        "session-id-producer",
        PRODUCER,
        Only(&["headerName", "cookieName"]),
    ),
    alpha(
        "p2p-source-producer",
        PRODUCER,
        Only(&["minCachedTokenDelta", "prefillProfileName"]),
    ),
    // ---- admitters, screeners, header processors, PreRequest (§2.9) ----
    t(
        "probabilistic-admitter",
        ADMITTER,
        Only(&["queueDepthThreshold", "kvCacheUtilThreshold", "power", "k"]),
    ),
    t("latency-slo-admitter", ADMITTER, Any),
    alpha(
        "disaggregatedset-rollout-screener",
        REQUEST_CONTROL,
        Only(&["scope", "headerSelectors", "revisionGating"]),
    ),
    alpha(
        "agent-identity",
        REQUEST_CONTROL,
        Only(&["additionalSessionHeaders"]),
    ),
    dep(
        "disagg-headers-handler",
        REQUEST_CONTROL,
        Only(&["prefillProfile", "encodeProfile"]),
        "disagg-profile-handler",
    ),
    dep(
        "prefill-header-handler",
        REQUEST_CONTROL,
        Only(&["prefillProfile"]),
        "disagg-profile-handler",
    ),
    t("request-attribute-reporter", REQUEST_CONTROL, Any),
    t("destination-endpoint-served-verifier", REQUEST_CONTROL, Any),
    // ---- parsers (§2.10) ----
    t("openai-parser", PARSER, Any),
    t("anthropic-parser", PARSER, Any),
    t("vllmhttp-parser", PARSER, Any),
    t("sglanghttp-parser", PARSER, Any),
    t("vllmgrpc-parser", PARSER, Any),
    t("vertexai-parser", PARSER, Any),
    t("passthrough-parser", PARSER, Any),
    // ---- data layer (§2.11) ----
    t("metrics-data-source", SOURCE, Any),
    t(
        "core-metrics-extractor",
        EXTRACTOR,
        Only(&["engineLabelKey", "defaultEngine", "engineConfigs"]),
    ),
    // llm-d's integration tests' data source of fixed metrics.
    t("mock-metrics-source", SOURCE, Any),
    t("models-data-source", SOURCE, Any),
    t("models-data-extractor", EXTRACTOR, Any),
    alpha(
        "dcgm-data-source",
        SOURCE,
        Only(&["port", "useNodeAddress", "interval"]),
    ),
    alpha("dcgm-extractor", EXTRACTOR, Any),
    alpha("topology-extractor", EXTRACTOR, Any),
    t("endpoint-notification-source", SOURCE, Any),
    t("k8s-notification-source", SOURCE, Any),
    t("file-discovery", DISCOVERY, Only(&["path", "watchFile"])),
    // ---- flow control (§2.12, §4) ----
    t("global-strict-fairness-policy", FAIRNESS, Any),
    t("round-robin-fairness-policy", FAIRNESS, Any),
    t(
        "program-aware-fairness",
        FAIRNESS,
        Only(&[
            "strategy",
            "lasWeightService",
            "lasWeightHeadWait",
            "lasHalfLifeSeconds",
            "evictionTtlSeconds",
            "evictionSweepSeconds",
        ]),
    ),
    t("fcfs-ordering-policy", ORDERING, Any),
    t("edf-ordering-policy", ORDERING, Any),
    t("slo-deadline-ordering-policy", ORDERING, Any),
    t(
        "static-usage-limit-policy",
        USAGE_LIMIT,
        Only(&["threshold"]),
    ),
    alpha(
        "priority-holdback-policy",
        USAGE_LIMIT,
        Only(&["shape", "domain", "minCeiling", "maxCeiling"]),
    ),
    alpha("soft-reflective-ceiling-policy", USAGE_LIMIT, Empty),
    alpha("sheddable-eviction-filter", REQUEST_CONTROL, Any),
    alpha(
        "priority-then-time-eviction-order-policy",
        REQUEST_CONTROL,
        Any,
    ),
];

/// The registered type `ty`, if any.
pub fn lookup(ty: &str) -> Option<&'static TypeInfo> {
    TYPES.iter().find(|t| t.ty == ty)
}

impl TypeInfo {
    pub fn is(&self, k: u32) -> bool {
        self.kinds & k != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_is_listed_once() {
        for (i, a) in TYPES.iter().enumerate() {
            assert!(
                TYPES[i + 1..].iter().all(|b| b.ty != a.ty),
                "{} twice",
                a.ty
            );
            assert!(a.kinds != 0, "{} has no hook", a.ty);
        }
    }
}
