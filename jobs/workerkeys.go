package jobs

import (
	"regexp"
	"strconv"
)

// Worker-made names. A job id is 1-128 characters of [A-Za-z0-9_-] (ValidToken), so a name
// with a '=' in it is one no producer can choose. '=' is also valid where such a name is
// used: in a key-value key (the state, claim and cancel entries), in a NATS subject token
// (la.results.<batch>.<name>, la.dlq.<name>), in a file name and in an S3 key.
const workerKeyMark = "="

// seqKeyPrefix starts the key of a job message that names no usable id (no valid id in its
// body, no valid Nats-Msg-Id): seq=<stream sequence>.
const seqKeyPrefix = "seq" + workerKeyMark

// SeqKey is the worker-made key of the job message at stream sequence seq whose id could
// not be read: its result, state and dead-letter record are keyed by it.
func SeqKey(seq uint64) string { return seqKeyPrefix + strconv.FormatUint(seq, 10) }

// lostJobName is the name under which the bytes of a message that lost job id to another
// message (stream sequence seq) are stored when its dead-letter record cannot carry them:
// <id>=lost-<seq>.job.json, never the owner's <id>.job.json.
func lostJobName(id string, seq uint64) string {
	return id + workerKeyMark + "lost-" + strconv.FormatUint(seq, 10)
}

// resultIDRE is what a result's id can be: a job id, or the worker-made key of a message
// whose id could not be read.
var resultIDRE = regexp.MustCompile(`^([A-Za-z0-9_-]{1,128}|seq=[0-9]{1,20})$`)

// ValidResultID reports whether s can be the id of a result or dead-letter record: a job id
// (ValidToken) or a worker-made SeqKey.
func ValidResultID(s string) bool { return resultIDRE.MatchString(s) }
