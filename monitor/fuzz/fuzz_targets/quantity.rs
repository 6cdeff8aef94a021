//! Resource quantities ("500Mi", "1.5Gi", "100m", "1e3") and threshold values ("10%"), as
//! they come from configuration files, flags and pod manifests (always text).
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::policy::quantity::{Quantity, parse_quantity, parse_quantity_or_percent};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_quantity(text) {
        Ok(quantity) => {
            // A parsed quantity is printed in eviction messages and read back by whoever
            // reads them: the printed form must parse to the same value.
            let shown = quantity.to_string();
            match parse_quantity(&shown) {
                Ok(again) => assert_eq!(again, quantity, "{text:?} prints as {shown:?}"),
                Err(e) => panic!("{text:?} prints as {shown:?}, which does not parse: {e}"),
            }
            let _ = (
                quantity.value(),
                quantity.milli_value(),
                quantity + quantity,
            );
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    match parse_quantity_or_percent(text) {
        Ok(value) => {
            let _ = (
                value.resolve(0),
                value.resolve(1 << 30),
                value.resolve(i64::MAX),
            );
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    // The same text as a JSON document: a string or a bare number.
    let _ = serde_json::from_str::<Quantity>(text);
});
