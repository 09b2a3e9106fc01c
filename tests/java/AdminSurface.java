// Every call of Apache Kafka's Java Admin client against one broker, for tests/compat: each
// call's outcome is printed as "call=OK" or "call=<exception class>" (and "call.detail=..."
// where the answer's content says more), for the Python test to compare with what Kafka
// 3.9.1 answers (this program asserts nothing itself). Usage:
//   AdminSurface <bootstrap> <tag>
// It creates topic "surface-<tag>" and group "surface-<tag>", and deletes them at the end.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateDelegationTokenOptions;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.FeatureUpdate;
import org.apache.kafka.clients.admin.FenceProducersOptions;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.RemoveMembersFromConsumerGroupOptions;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UpdateFeaturesOptions;
import org.apache.kafka.clients.admin.UserScramCredentialDeletion;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringSerializer;

public final class AdminSurface {
    static final long WAIT_S = 30;

    interface Call {
        Object run() throws Exception;
    }

    static void out(String name, Object value) {
        System.out.println(name + "=" + value);
        System.out.flush();
    }

    /** Runs one call: "OK" (and its detail, if it returns one) or the exception's class. */
    static Object call(String name, Call c) {
        try {
            Object detail = c.run();
            out(name, "OK");
            if (detail != null) {
                out(name + ".detail", detail);
            }
            return detail;
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            cause.printStackTrace();
            out(name, cause.getClass().getSimpleName());
            out(name + ".message", String.valueOf(cause.getMessage()).split("\n")[0]);
        } catch (Exception e) {
            e.printStackTrace();
            out(name, e.getClass().getSimpleName());
            out(name + ".message", String.valueOf(e.getMessage()).split("\n")[0]);
        }
        return null;
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = "surface-" + args[1];
        String group = topic;
        TopicPartition p0 = new TopicPartition(topic, 0);
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("default.api.timeout.ms", "30000");
        props.put("request.timeout.ms", "20000");
        try (Admin admin = Admin.create(props)) {
            DescribeClusterResult cluster = admin.describeCluster(
                    new DescribeClusterOptions().includeAuthorizedOperations(true));
            int brokerId = cluster.nodes().get(WAIT_S, TimeUnit.SECONDS).iterator().next().id();
            call("describeCluster", () -> {
                int controller = cluster.controller().get(WAIT_S, TimeUnit.SECONDS).id();
                String id = cluster.clusterId().get(WAIT_S, TimeUnit.SECONDS);
                Set<AclOperation> ops = cluster.authorizedOperations().get(WAIT_S, TimeUnit.SECONDS);
                return "controller_is_node:" + (controller == brokerId) + " cluster_id:" + (id != null)
                        + " operations:" + (ops == null ? "null" : ops.size());
            });
            String brokerName = Integer.toString(brokerId);
            ConfigResource topicResource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            ConfigResource brokerResource = new ConfigResource(ConfigResource.Type.BROKER, brokerName);

            call("createTopics", () -> admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1)))
                    .all().get(WAIT_S, TimeUnit.SECONDS));
            call("listTopics", () -> admin.listTopics().names().get(WAIT_S, TimeUnit.SECONDS)
                    .contains(topic));
            Uuid[] topicId = new Uuid[1];
            call("describeTopics", () -> {
                var d = admin.describeTopics(List.of(topic)).allTopicNames()
                        .get(WAIT_S, TimeUnit.SECONDS).get(topic);
                topicId[0] = d.topicId();
                return "partitions:" + d.partitions().size();
            });
            call("describeTopicsById", () -> admin.describeTopics(
                    TopicCollection.ofTopicIds(List.of(topicId[0]))).allTopicIds()
                    .get(WAIT_S, TimeUnit.SECONDS).get(topicId[0]).name().equals(topic));
            call("createPartitions", () -> admin.createPartitions(
                    Map.of(topic, NewPartitions.increaseTo(3))).all().get(WAIT_S, TimeUnit.SECONDS));

            Properties pp = new Properties();
            pp.put("bootstrap.servers", bootstrap);
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                for (int i = 0; i < 5; i++) {
                    producer.send(new ProducerRecord<>(topic, 0, 1000L + i, "k", "v" + i));
                }
                producer.flush();
            }
            call("listOffsets", () -> {
                long latest = admin.listOffsets(Map.of(p0, OffsetSpec.latest())).all()
                        .get(WAIT_S, TimeUnit.SECONDS).get(p0).offset();
                long earliest = admin.listOffsets(Map.of(p0, OffsetSpec.earliest())).all()
                        .get(WAIT_S, TimeUnit.SECONDS).get(p0).offset();
                long max = admin.listOffsets(Map.of(p0, OffsetSpec.maxTimestamp())).all()
                        .get(WAIT_S, TimeUnit.SECONDS).get(p0).offset();
                long at = admin.listOffsets(Map.of(p0, OffsetSpec.forTimestamp(1002L))).all()
                        .get(WAIT_S, TimeUnit.SECONDS).get(p0).offset();
                return "latest:" + latest + " earliest:" + earliest + " max:" + max + " at1002:" + at;
            });
            call("deleteRecords", () -> admin.deleteRecords(
                    Map.of(p0, RecordsToDelete.beforeOffset(2))).all().get(WAIT_S, TimeUnit.SECONDS));
            call("describeConfigs", () -> {
                Map<ConfigResource, Config> got = admin.describeConfigs(
                        List.of(topicResource, brokerResource)).all().get(WAIT_S, TimeUnit.SECONDS);
                return "topic_has_retention:" + (got.get(topicResource).get("retention.ms") != null)
                        + " broker_has_num_partitions:"
                        + (got.get(brokerResource).get("num.partitions") != null);
            });
            call("incrementalAlterConfigs", () -> admin.incrementalAlterConfigs(Map.of(topicResource,
                    List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "86400000"),
                            AlterConfigOp.OpType.SET)))).all().get(WAIT_S, TimeUnit.SECONDS));
            call("alterConfigs", () -> admin.alterConfigs(Map.of(topicResource,
                    new Config(List.of(new ConfigEntry("retention.ms", "3600000")))))
                    .all().get(WAIT_S, TimeUnit.SECONDS));
            String[] logDir = new String[1];
            call("describeLogDirs", () -> {
                var dirs = admin.describeLogDirs(List.of(brokerId)).allDescriptions()
                        .get(WAIT_S, TimeUnit.SECONDS).get(brokerId);
                logDir[0] = dirs.keySet().iterator().next();
                return "dirs:" + dirs.size() + " has_partition:"
                        + dirs.values().iterator().next().replicaInfos().containsKey(p0);
            });
            TopicPartitionReplica replica = new TopicPartitionReplica(topic, 0, brokerId);
            call("describeReplicaLogDirs", () -> admin.describeReplicaLogDirs(List.of(replica))
                    .all().get(WAIT_S, TimeUnit.SECONDS).get(replica).getCurrentReplicaLogDir()
                    .equals(logDir[0]));
            call("alterReplicaLogDirs", () -> admin.alterReplicaLogDirs(Map.of(replica, logDir[0]))
                    .all().get(WAIT_S, TimeUnit.SECONDS));

            call("alterConsumerGroupOffsets", () -> admin.alterConsumerGroupOffsets(group,
                    Map.of(p0, new OffsetAndMetadata(3, "meta"))).all().get(WAIT_S, TimeUnit.SECONDS));
            call("listConsumerGroupOffsets", () -> admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata().get(WAIT_S, TimeUnit.SECONDS).get(p0).offset());
            call("listConsumerGroups", () -> admin.listConsumerGroups().all()
                    .get(WAIT_S, TimeUnit.SECONDS).stream().anyMatch(g -> g.groupId().equals(group)));
            call("describeConsumerGroups", () -> admin.describeConsumerGroups(List.of(group))
                    .all().get(WAIT_S, TimeUnit.SECONDS).get(group).state());
            call("removeMembersFromConsumerGroup", () -> admin.removeMembersFromConsumerGroup(group,
                    new RemoveMembersFromConsumerGroupOptions()).all().get(WAIT_S, TimeUnit.SECONDS));
            call("deleteConsumerGroupOffsets", () -> admin.deleteConsumerGroupOffsets(group,
                    Set.of(p0)).all().get(WAIT_S, TimeUnit.SECONDS));
            call("deleteConsumerGroups", () -> admin.deleteConsumerGroups(List.of(group)).all()
                    .get(WAIT_S, TimeUnit.SECONDS));

            call("electLeaders", () -> admin.electLeaders(ElectionType.PREFERRED, Set.of(p0))
                    .partitions().get(WAIT_S, TimeUnit.SECONDS).get(p0)
                    .map(e -> e.getClass().getSimpleName()).orElse("elected"));
            call("alterPartitionReassignments", () -> admin.alterPartitionReassignments(Map.of(p0,
                    Optional.of(new NewPartitionReassignment(List.of(brokerId))))).all()
                    .get(WAIT_S, TimeUnit.SECONDS));
            call("listPartitionReassignments", () -> admin.listPartitionReassignments().reassignments()
                    .get(WAIT_S, TimeUnit.SECONDS).size());

            AclBinding acl = new AclBinding(
                    new ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                    new AccessControlEntry("User:surface", "*", AclOperation.READ,
                            AclPermissionType.ALLOW));
            call("createAcls", () -> admin.createAcls(List.of(acl)).all().get(WAIT_S, TimeUnit.SECONDS));
            call("describeAcls", () -> admin.describeAcls(AclBindingFilter.ANY).values()
                    .get(WAIT_S, TimeUnit.SECONDS).size());
            call("deleteAcls", () -> admin.deleteAcls(List.of(acl.toFilter())).all()
                    .get(WAIT_S, TimeUnit.SECONDS).size());

            ClientQuotaEntity entity = new ClientQuotaEntity(Map.of(ClientQuotaEntity.USER, "surface"));
            call("alterClientQuotas", () -> admin.alterClientQuotas(List.of(new ClientQuotaAlteration(
                    entity, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 1024.0)))))
                    .all().get(WAIT_S, TimeUnit.SECONDS));
            call("describeClientQuotas", () -> admin.describeClientQuotas(ClientQuotaFilter.all())
                    .entities().get(WAIT_S, TimeUnit.SECONDS).get(entity));
            call("alterUserScramCredentials", () -> admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialUpsertion("surface",
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), "secret")))
                    .all().get(WAIT_S, TimeUnit.SECONDS));
            call("describeUserScramCredentials", () -> admin.describeUserScramCredentials(
                    List.of("surface")).all().get(WAIT_S, TimeUnit.SECONDS).get("surface")
                    .credentialInfos().size());
            call("deleteUserScramCredentials", () -> admin.alterUserScramCredentials(List.of(
                    new UserScramCredentialDeletion("surface", ScramMechanism.SCRAM_SHA_256)))
                    .all().get(WAIT_S, TimeUnit.SECONDS));

            call("createDelegationToken", () -> admin.createDelegationToken(
                    new CreateDelegationTokenOptions()).delegationToken().get(WAIT_S, TimeUnit.SECONDS));
            call("describeDelegationToken", () -> admin.describeDelegationToken().delegationTokens()
                    .get(WAIT_S, TimeUnit.SECONDS).size());

            call("describeFeatures", () -> admin.describeFeatures().featureMetadata()
                    .get(WAIT_S, TimeUnit.SECONDS).finalizedFeatures().size());
            call("updateFeatures", () -> admin.updateFeatures(Map.of("surface.feature",
                    new FeatureUpdate((short) 1, FeatureUpdate.UpgradeType.UPGRADE)),
                    new UpdateFeaturesOptions()).all().get(WAIT_S, TimeUnit.SECONDS));
            call("describeMetadataQuorum", () -> admin.describeMetadataQuorum().quorumInfo()
                    .get(WAIT_S, TimeUnit.SECONDS));
            call("unregisterBroker", () -> admin.unregisterBroker(9999).all()
                    .get(WAIT_S, TimeUnit.SECONDS));
            call("listClientMetricsResources", () -> admin.listClientMetricsResources().all()
                    .get(WAIT_S, TimeUnit.SECONDS).size());

            call("fenceProducers", () -> admin.fenceProducers(List.of(topic),
                    new FenceProducersOptions()).all().get(WAIT_S, TimeUnit.SECONDS));
            call("describeProducers", () -> admin.describeProducers(List.of(p0)).all()
                    .get(WAIT_S, TimeUnit.SECONDS).get(p0).activeProducers().size());
            call("describeTransactions", () -> admin.describeTransactions(List.of(topic)).all()
                    .get(WAIT_S, TimeUnit.SECONDS).get(topic).state());
            call("listTransactions", () -> admin.listTransactions().all()
                    .get(WAIT_S, TimeUnit.SECONDS).stream()
                    .anyMatch(t -> t.transactionalId().equals(topic)));

            call("deleteTopics", () -> admin.deleteTopics(List.of(topic)).all()
                    .get(WAIT_S, TimeUnit.SECONDS));
            call("deleteTopicsById", () -> admin.deleteTopics(TopicCollection.ofTopicIds(
                    List.of(Uuid.randomUuid()))).all().get(WAIT_S, TimeUnit.SECONDS));
        }
        out("done", "true");
    }
}
