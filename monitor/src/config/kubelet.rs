//! KubeletConfiguration (in progress)
