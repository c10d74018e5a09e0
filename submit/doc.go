// Package submit is the library behind the submit CLI: it turns files, directories, globs,
// S3 prefixes and manifests into detection jobs with deterministic ids (plan), publishes
// them to LA_JOBS with bounded in-flight publishes (publish), collects their results from
// LA_RESULTS into an output directory that mirrors the inputs (collect, layout), exports
// them as COCO, and resumes after an interruption without resubmitting finished work. Admin
// answers status, cancel and dead-letter queue questions (inspect).
//
// Its own settings are Settings; cmd/submit holds the command line (flags, help, exit
// codes) and reads the configuration through package config, as cmd/worker does.
package submit
