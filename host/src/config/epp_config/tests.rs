//! Tests of the EPP config reader.
