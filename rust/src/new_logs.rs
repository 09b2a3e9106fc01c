//! Creating the logs of new topics in bulk.
//!
//! A topic's partitions get their directories, an empty first segment and
//! the `partition.metadata` file naming the topic (Kafka's format:
//! `version: 0` and `topic_id: <base64 id>`) in one call, so a broker
//! creating thousands of topics makes one call for all of them instead of a
//! few small file operations per partition from Python. Each topic is all or
//! nothing: when one of its partitions cannot be created, the directories
//! this call made for the topic are removed again and the topic gets the
//! error, while the other topics of the call go on.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::log::{Log, LogConfig};

/// The file by which a partition directory names its topic.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

/// One partition to create: its directory and its storage settings.
pub struct NewPartition {
    pub dir: PathBuf,
    pub config: LogConfig,
}

/// The partitions of one topic and the topic's id as Kafka writes it in
/// `partition.metadata` (URL-safe base64 of the 16 bytes, no padding).
pub struct NewTopicLogs {
    pub topic_id: String,
    pub partitions: Vec<NewPartition>,
}

/// A topic id in Kafka's text form: 22 characters of URL-safe base64.
fn check_topic_id(id: &str) -> Result<()> {
    let ok = id.len() == 22
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{id:?} is not a topic id (22 characters of URL-safe base64)"
        )))
    }
}

/// Writes `partition.metadata` into `dir` unless it is there: a temp file
/// renamed into place, so a crash leaves the whole file or none. No fsync:
/// a lost file is written again the next time the partition opens.
pub fn write_partition_metadata(dir: &Path, topic_id: &str) -> Result<()> {
    check_topic_id(topic_id)?;
    let path = dir.join(PARTITION_METADATA_FILE);
    if path.exists() {
        return Ok(());
    }
    let tmp = dir.join(format!("{PARTITION_METADATA_FILE}.tmp"));
    let written = fs::File::create(&tmp)
        .and_then(|mut f| f.write_all(format!("version: 0\ntopic_id: {topic_id}\n").as_bytes()))
        .and_then(|()| fs::rename(&tmp, &path));
    written.map_err(|e| {
        let _ = fs::remove_file(&tmp);
        Error::File(path, e)
    })
}

/// Creates (or, for a directory already there, opens) the logs of one
/// topic; on failure removes the directories it made.
fn create_topic(topic: NewTopicLogs, now_ms: i64) -> Result<Vec<Log>> {
    check_topic_id(&topic.topic_id)?;
    let mut logs = Vec::with_capacity(topic.partitions.len());
    let mut made: Vec<PathBuf> = Vec::new();
    let mut result = Ok(());
    for p in topic.partitions {
        let new = !p.dir.exists();
        if new {
            made.push(p.dir.clone());
        }
        match Log::open(&p.dir, p.config, now_ms)
            .and_then(|log| write_partition_metadata(&p.dir, &topic.topic_id).map(|()| log))
        {
            Ok(log) => logs.push(log),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    match result {
        Ok(()) => Ok(logs),
        Err(e) => {
            drop(logs); // their files close before their directories go
            for dir in made {
                // The creation's error is the one to report; a directory that cannot
                // be removed either is adopted (empty) at the next start.
                let _ = fs::remove_dir_all(&dir);
            }
            Err(e)
        }
    }
}

/// Creates the logs of each topic: one result per topic, in order.
pub fn create_topic_logs(topics: Vec<NewTopicLogs>, now_ms: i64) -> Vec<Result<Vec<Log>>> {
    topics
        .into_iter()
        .map(|topic| create_topic(topic, now_ms))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(root: &Path, name: &str) -> NewPartition {
        NewPartition {
            dir: root.join(name),
            config: LogConfig::default(),
        }
    }

    const ID: &str = "AAECAwQFBgcICQoLDA0ODw";

    #[test]
    fn creates_every_partition_with_its_metadata_file() {
        let root = tempfile::tempdir().unwrap();
        let results = create_topic_logs(
            vec![NewTopicLogs {
                topic_id: ID.into(),
                partitions: vec![partition(root.path(), "t-0"), partition(root.path(), "t-1")],
            }],
            0,
        );
        let logs = results.into_iter().next().unwrap().unwrap();
        assert_eq!(logs.len(), 2);
        for name in ["t-0", "t-1"] {
            let text =
                fs::read_to_string(root.path().join(name).join(PARTITION_METADATA_FILE)).unwrap();
            assert_eq!(text, format!("version: 0\ntopic_id: {ID}\n"));
            assert!(!root
                .path()
                .join(name)
                .join("partition.metadata.tmp")
                .exists());
        }
    }

    #[test]
    fn a_topic_that_fails_leaves_no_directory_and_others_go_on() {
        let root = tempfile::tempdir().unwrap();
        // A file where the second partition's directory would be.
        fs::write(root.path().join("bad-1"), b"").unwrap();
        let results = create_topic_logs(
            vec![
                NewTopicLogs {
                    topic_id: ID.into(),
                    partitions: vec![
                        partition(root.path(), "bad-0"),
                        partition(root.path(), "bad-1"),
                    ],
                },
                NewTopicLogs {
                    topic_id: ID.into(),
                    partitions: vec![partition(root.path(), "good-0")],
                },
            ],
            0,
        );
        assert!(results[0].is_err());
        assert!(!root.path().join("bad-0").exists());
        assert!(root.path().join("bad-1").is_file(), "what was there stays");
        assert_eq!(results[1].as_ref().unwrap().len(), 1);
    }

    #[test]
    fn a_data_dir_that_is_a_file_is_an_error_naming_the_path() {
        let root = tempfile::tempdir().unwrap();
        let not_a_dir = root.path().join("data");
        fs::write(&not_a_dir, b"").unwrap();
        let results = create_topic_logs(
            vec![NewTopicLogs {
                topic_id: ID.into(),
                partitions: vec![partition(&not_a_dir, "t-0")],
            }],
            0,
        );
        let err = results.into_iter().next().unwrap().err().unwrap();
        assert!(matches!(err, Error::File(..)), "{err}");
        assert!(err.to_string().contains("t-0"), "{err}");
    }

    #[test]
    fn a_bad_topic_id_is_refused_before_any_file() {
        let root = tempfile::tempdir().unwrap();
        let results = create_topic_logs(
            vec![NewTopicLogs {
                topic_id: "not an id".into(),
                partitions: vec![partition(root.path(), "t-0")],
            }],
            0,
        );
        assert!(matches!(results[0], Err(Error::InvalidArgument(_))));
        assert!(!root.path().join("t-0").exists());
    }

    #[test]
    fn an_existing_metadata_file_is_kept() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("t-0");
        fs::create_dir(&dir).unwrap();
        fs::write(
            dir.join(PARTITION_METADATA_FILE),
            "version: 0\ntopic_id: old\n",
        )
        .unwrap();
        write_partition_metadata(&dir, ID).unwrap();
        assert_eq!(
            fs::read_to_string(dir.join(PARTITION_METADATA_FILE)).unwrap(),
            "version: 0\ntopic_id: old\n"
        );
    }
}
