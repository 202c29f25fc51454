//! Assertions whose failure messages show the whole of what was compared,
//! so a failing test can be understood from its output alone.

/// Assert `expected == got`, printing both in full (pretty `Debug`) when not.
macro_rules! eqnice {
    ($expected:expr, $got:expr $(,)?) => {{
        let expected = &$expected;
        let got = &$got;
        if expected != got {
            panic!(
                "\n\n==================== expected ====================\n{:#?}\
                 \n====================== got =======================\n{:#?}\
                 \n==================================================\n",
                expected, got
            );
        }
    }};
    ($expected:expr, $got:expr, $($context:tt)+) => {{
        let expected = &$expected;
        let got = &$got;
        if expected != got {
            panic!(
                "\n\n==================== expected ====================\n{:#?}\
                 \n====================== got =======================\n{:#?}\
                 \n==================================================\n{}\n",
                expected,
                got,
                format!($($context)+)
            );
        }
    }};
}

/// Assert that `text` contains every one of the needles, printing the whole
/// text and the missing needle when not.
macro_rules! assert_contains {
    ($text:expr, $($needle:expr),+ $(,)?) => {
        // `match` keeps temporaries such as `err.to_string()` alive.
        match &$text {
            text => {
                $( $crate::macros::check_contains(text.as_ref(), (&$needle).as_ref(), true); )+
            }
        }
    };
}

/// Assert that `text` contains none of the needles.
macro_rules! assert_lacks {
    ($text:expr, $($needle:expr),+ $(,)?) => {
        match &$text {
            text => {
                $( $crate::macros::check_contains(text.as_ref(), (&$needle).as_ref(), false); )+
            }
        }
    };
}

/// Panic, showing all of `text`, unless `text.contains(needle) == wanted`.
#[track_caller]
pub fn check_contains(text: &str, needle: &str, wanted: bool) {
    if text.contains(needle) != wanted {
        let not = if wanted { "" } else { "NOT " };
        panic!(
            "\n\nexpected the text {not}to contain:\n    {needle:?}\n\
             ====================== text =======================\n{text}\
             \n===================================================\n"
        );
    }
}
