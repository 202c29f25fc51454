//! The run seed as a TOML value: any u64. TOML integers stop at i64::MAX,
//! so a larger seed is written as a decimal string (`seed =
//! "18446744073709551615"`); `--seed` takes any u64 and is written the same
//! way into the run table.

use serde::{de, Deserialize, Deserializer, Serializer};

/// The TOML value holding `seed`: an integer when it fits, else a string.
pub fn to_value(seed: u64) -> toml::Value {
    match i64::try_from(seed) {
        Ok(i) => toml::Value::Integer(i),
        Err(_) => toml::Value::String(seed.to_string()),
    }
}

/// Serialize a seed as [`to_value`] does.
pub fn serialize<S: Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
    match i64::try_from(*seed) {
        Ok(i) => s.serialize_i64(i),
        Err(_) => s.serialize_str(&seed.to_string()),
    }
}

/// Read a seed: a non-negative integer, or a string of decimal digits up
/// to 18446744073709551615.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Int(i64),
        Text(String),
    }
    const WHAT: &str = "a seed: an integer 0 ..= 18446744073709551615 (above 9223372036854775807 write it as a string, e.g. seed = \"18446744073709551615\")";
    match Raw::deserialize(d).map_err(|_| de::Error::custom(format!("expected {WHAT}")))? {
        Raw::Int(i) => u64::try_from(i)
            .map_err(|_| de::Error::custom(format!("seed = {i} is negative; expected {WHAT}"))),
        Raw::Text(t) => t
            .trim()
            .parse::<u64>()
            .map_err(|_| de::Error::custom(format!("seed = \"{t}\" is not {WHAT}"))),
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Deserialize, Serialize)]
    struct T {
        #[serde(with = "super")]
        seed: u64,
    }

    fn read(s: &str) -> Result<u64, String> {
        toml::from_str::<T>(s)
            .map(|t| t.seed)
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn every_u64_round_trips_and_nothing_else_reads() {
        for seed in [0, 42, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX] {
            let text = toml::to_string(&T { seed }).unwrap();
            assert_eq!(read(&text), Ok(seed), "{text}");
            assert_eq!(
                toml::Value::try_from(T { seed }).unwrap()["seed"],
                super::to_value(seed)
            );
        }
        assert_eq!(read("seed = \"18446744073709551615\""), Ok(u64::MAX));
        assert_eq!(read("seed = \"7\""), Ok(7));
        for bad in [
            "seed = -1",
            "seed = \"18446744073709551616\"",
            "seed = \"x\"",
            "seed = 1.5",
        ] {
            let e = read(bad).unwrap_err();
            assert!(
                e.contains("seed") && e.contains("18446744073709551615"),
                "{bad}: {e}"
            );
        }
    }
}
