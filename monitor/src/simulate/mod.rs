//! `monitor simulate`: the policy run offline (in progress).
