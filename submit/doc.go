// Package submit is the logic of the submit CLI: it turns files, directories, globs, S3
// prefixes and manifests into detection jobs with deterministic ids, publishes them to
// LA_JOBS with bounded in-flight publishes, collects their results from LA_RESULTS into an
// output directory, and resumes after an interruption without resubmitting finished work.
// It also answers status, cancel and dead-letter queue questions.
//
// cmd/submit is a thin main around Main.
package submit
