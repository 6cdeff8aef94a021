pub mod cgroups;
