//! Exact, hand-computed cases of the tune's parameter scales (unit
//! coordinate ↔ value) and of its mean and spread.

use super::file::{Param, Scale};
use super::*;

fn p(scale: Scale, min: f64, max: f64) -> Param {
    Param {
        key: "k".into(),
        name: "k".into(),
        min,
        max,
        scale,
        start: toml::Value::Float(min),
    }
}

/// Unit coordinates map to values and back on each scale.
#[test]
fn scales_map_the_unit_interval() {
    let lin = p(Scale::Linear, 2.0, 6.0);
    assert_eq!(lin.value(0.25), toml::Value::Float(3.0));
    assert!((lin.unit(&toml::Value::Float(5.0)) - 0.75).abs() < 1e-12);
    let log = p(Scale::Log, 1.0, 100.0);
    assert!((log.value(0.5).as_float().unwrap() - 10.0).abs() < 1e-9);
    assert!((log.unit(&toml::Value::Float(10.0)) - 0.5).abs() < 1e-12);
    let int = p(Scale::Integer, 1.0, 5.0);
    assert_eq!(int.value(0.6), toml::Value::Integer(3));
    assert_eq!(int.value(2.0), toml::Value::Integer(5));
    let vs = vec![
        toml::Value::String("a".into()),
        toml::Value::String("b".into()),
        toml::Value::String("c".into()),
    ];
    let ch = p(Scale::Choice(vs.clone()), 0.0, 1.0);
    assert_eq!(ch.value(0.0), vs[0]);
    assert_eq!(ch.value(0.5), vs[1]);
    assert_eq!(ch.value(1.0), vs[2]);
    assert_eq!(ch.value(ch.unit(&vs[2])), vs[2]);
}

/// Mean and sample standard deviation, by hand.
#[test]
fn mean_and_spread() {
    let (m, sd) = mean_sd(&[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(m, 2.5);
    assert!((sd - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
    assert_eq!(mean_sd(&[7.0]), (7.0, 0.0));
}
