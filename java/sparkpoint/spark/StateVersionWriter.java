package sparkpoint.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Iterator;
import java.util.List;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.spark.SparkEnv;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.io.CompressionCodec;
import org.apache.spark.io.CompressionCodec$;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.util.SerializableConfiguration;
import org.rocksdb.Checkpoint;
import org.rocksdb.ColumnFamilyDescriptor;
import org.rocksdb.ConfigOptions;
import org.rocksdb.DBOptions;
import org.rocksdb.EnvOptions;
import org.rocksdb.IngestExternalFileOptions;
import org.rocksdb.Options;
import org.rocksdb.OptionsUtil;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.SstFileWriter;

/**
 * Writes new state store versions from rows already encoded as the store keeps them, in Spark
 * tasks: the rows never leave the JVM (no hand-over to Python workers, which cost as much as
 * Spark's whole read of the state).
 *
 * <p>The input is (partition int, key struct, value struct), the partition the new store
 * partition of the key. Spark's shuffle brings each partition's rows to one task, which
 * encodes each key and value as the store keeps them (Spark's {@code UnsafeRow} of the
 * struct, by Spark's projection for its type) and writes version {@code version} of that
 * partition into its directory:
 *
 * <ul>
 *   <li>HDFS-backed provider: one {@code <version>.snapshot}, as
 *       {@code HDFSBackedStateStoreProvider.writeSnapshotFile} writes it (through Spark's lz4
 *       codec, each record the key's length, key, value's length, value; -1 at the end);
 *   <li>RocksDB provider (keys without a prefix column): the pairs, each after the
 *       encoding version byte Spark's encoders write, sorted bytewise, in one SST written
 *       with the store's own settings (the OPTIONS file of a version Spark's provider wrote),
 *       ingested into a new database whose checkpoint is packed as Spark commits a version
 *       ({@link RocksDbVersionFiles#pack}), its {@code metadata} that version's but the SST
 *       list and {@code numKeys}.
 * </ul>
 *
 * <p>A partition's directory is a path of the task's disk, or a URL of a store Hadoop reaches
 * (s3a, hdfs): then the version is written in a temporary directory of the executor and
 * uploaded through Hadoop's file system, with the application's Hadoop settings (the s3a
 * endpoint and credentials), as Spark's own state stores upload theirs. Executors need no
 * disk shared with the driver.
 *
 * <p>A key given twice is refused when the rows come from a query ({@code checkRepeats}); a
 * state's own keys are one per key. A task returns (partition, rows) per partition written.
 */
public final class StateVersionWriter {
  // The first byte of every stored key and value (Spark's STATE_ENCODING_VERSION).
  private static final byte ENCODING_VERSION = 0;
  // spark.sql.streaming.stateStore.compression.codec's default, the one sparkpoint reads.
  private static final String SNAPSHOT_CODEC = "lz4";
  // Ends the message of a task that does not see the driver's directory; the Python caller
  // recognises it (spark/driver_disk.py NOT_ON_THIS_DISK).
  private static final String NOT_ON_THIS_DISK = "is not on this executor's disk";

  private StateVersionWriter() {}

  /**
   * Runs the writing as one Spark job; returns, flattened, a (partition, rows) pair per
   * partition written.
   *
   * @param encoded columns: partition (int), key (struct), value (struct)
   * @param partitionDirs each partition's new directory (created here), by partition: local
   *     paths, or URLs of a store
   * @param checkedDir a directory of the driver's disk every task must see; null when the
   *     directories are URLs
   * @param rocksDbOptions the OPTIONS text of a RocksDB version Spark wrote; null for the
   *     HDFS-backed provider
   * @param rocksDbMetadata that version's {@code metadata} (JSON); null for HDFS-backed
   */
  public static long[] run(Dataset<Row> encoded, String[] partitionDirs, long version,
      String checkedDir, String rocksDbOptions, String rocksDbMetadata, boolean checkRepeats) {
    Dataset<Row> placed = encoded.repartition(partitionDirs.length,
        functions.col(encoded.columns()[0]));
    StructType columns = encoded.schema();
    boolean remote = Arrays.stream(partitionDirs).anyMatch(StateVersionWriter::isUrl);
    // The session's Hadoop settings (the application's and the session's own, e.g. the s3a
    // settings of a caller's session copy), shipped with the tasks as Spark's readers do.
    SerializableConfiguration hadoop = remote
        ? new SerializableConfiguration(((org.apache.spark.sql.classic.SparkSession)
            encoded.sparkSession()).sessionState().newHadoopConf())
        : null;
    Task task = new Task(partitionDirs, version, checkedDir, rocksDbOptions, rocksDbMetadata,
        checkRepeats, columns.fields()[1].dataType().json(),
        columns.fields()[2].dataType().json(), hadoop);
    List<long[]> done = placed.queryExecution().toRdd().toJavaRDD().mapPartitions(task)
        .collect();
    long[] flat = new long[done.size() * 2];
    for (int i = 0; i < done.size(); i++) {
      System.arraycopy(done.get(i), 0, flat, 2 * i, 2);
    }
    return flat;
  }

  private static boolean isUrl(String directory) {
    return directory.contains("://");
  }

  /** A refusal of the rows a task was given: its message is the whole story. */
  public static final class StateWriteError extends RuntimeException {
    private static final long serialVersionUID = 1L;

    StateWriteError(String message) {
      super(message);
    }
  }

  private static final class Rows {
    final List<byte[]> keys = new ArrayList<>();
    final List<byte[]> values = new ArrayList<>();
  }

  private static final class Task implements FlatMapFunction<Iterator<InternalRow>, long[]> {
    private static final long serialVersionUID = 1L;

    private final String[] partitionDirs;
    private final long version;
    private final String checkedDir;
    private final String rocksDbOptions;
    private final String rocksDbMetadata;
    private final boolean checkRepeats;
    private final String keyType;
    private final String valueType;
    private final SerializableConfiguration hadoop;

    Task(String[] partitionDirs, long version, String checkedDir, String rocksDbOptions,
        String rocksDbMetadata, boolean checkRepeats, String keyType, String valueType,
        SerializableConfiguration hadoop) {
      this.partitionDirs = partitionDirs;
      this.version = version;
      this.checkedDir = checkedDir;
      this.rocksDbOptions = rocksDbOptions;
      this.rocksDbMetadata = rocksDbMetadata;
      this.checkRepeats = checkRepeats;
      this.keyType = keyType;
      this.valueType = valueType;
      this.hadoop = hadoop;
    }

    @Override
    public Iterator<long[]> call(Iterator<InternalRow> input) throws Exception {
      // The shuffle hashes the partition number: a task may get several partitions.
      TreeMap<Integer, Rows> byPartition = new TreeMap<>();
      StructType keys = (StructType) DataType.fromJson(keyType);
      StructType values = (StructType) DataType.fromJson(valueType);
      UnsafeProjection keyRow = UnsafeProjection.create(keys);
      UnsafeProjection valueRow = UnsafeProjection.create(values);
      // RocksDB stores each key and value after an encoding version byte.
      int prefix = rocksDbOptions == null ? 0 : 1;
      while (input.hasNext()) {
        InternalRow row = input.next();
        Rows rows = byPartition.computeIfAbsent(row.getInt(0), p -> new Rows());
        rows.keys.add(copied(unsafe(row.getStruct(1, keys.length()), keyRow), prefix));
        rows.values.add(copied(unsafe(row.getStruct(2, values.length()), valueRow), prefix));
      }
      List<long[]> written = new ArrayList<>();
      if (byPartition.isEmpty()) {
        return written.iterator();
      }
      if (checkedDir != null && !Files.isDirectory(Paths.get(checkedDir))) {
        throw new StateWriteError(checkedDir + " (from the driver, on host "
            + InetAddress.getLocalHost().getHostName() + ") " + NOT_ON_THIS_DISK);
      }
      for (var entry : byPartition.entrySet()) {
        int partition = entry.getKey();
        Rows rows = entry.getValue();
        // Counted first: the RocksDB writer lets go of the rows once it has them in order.
        long count = rows.keys.size();
        String target = partitionDirs[partition];
        boolean remote = isUrl(target);
        Path directory = remote ? Files.createTempDirectory("sparkpoint-version-")
            : Files.createDirectories(Paths.get(target));
        try {
          if (rocksDbOptions == null) {
            writeSnapshot(directory, rows);
          } else {
            writeRocksDb(directory, rows);
          }
          if (remote) {
            upload(directory, target);
          }
        } finally {
          if (remote) {
            RocksDbVersionFiles.deleteTree(directory);
          }
        }
        written.add(new long[] {partition, count});
      }
      return written.iterator();
    }

    /** Every file under {@code directory} copied to the same name under {@code url}; a
     * retried task's copy replaces the first's (the same bytes). */
    private void upload(Path directory, String url) throws IOException {
      org.apache.hadoop.fs.Path base = new org.apache.hadoop.fs.Path(url);
      FileSystem store = base.getFileSystem(hadoop.value());
      List<Path> files;
      try (Stream<Path> walked = Files.walk(directory)) {
        files = walked.filter(Files::isRegularFile).sorted().toList();
      }
      for (Path file : files) {
        String relative = directory.relativize(file).toString();
        store.copyFromLocalFile(false, true, new org.apache.hadoop.fs.Path(file.toUri()),
            new org.apache.hadoop.fs.Path(base, relative));
      }
    }

    private void writeSnapshot(Path directory, Rows rows) throws IOException {
      if (checkRepeats) {
        byte[][] keys = rows.keys.toArray(new byte[0][]);
        Arrays.sort(keys, Arrays::compareUnsigned);
        refuseRepeated(directory, keys);
      }
      Path temporary = Files.createTempFile(directory, ".sparkpoint-", ".snapshot.tmp");
      CompressionCodec codec = CompressionCodec$.MODULE$.createCodec(SparkEnv.get().conf(),
          SNAPSHOT_CODEC);
      try (OutputStream file = Files.newOutputStream(temporary);
          DataOutputStream out = new DataOutputStream(codec.compressedOutputStream(file))) {
        for (int i = 0; i < rows.keys.size(); i++) {
          byte[] key = rows.keys.get(i);
          byte[] value = rows.values.get(i);
          out.writeInt(key.length);
          out.write(key);
          out.writeInt(value.length);
          out.write(value);
        }
        out.writeInt(-1);
      }
      Files.move(temporary, directory.resolve(version + ".snapshot"),
          StandardCopyOption.ATOMIC_MOVE);
    }

    private void writeRocksDb(Path directory, Rows rows) throws IOException, RocksDBException {
      int count = rows.keys.size();
      byte[][][] pairs = new byte[count][][];
      for (int i = 0; i < count; i++) {
        pairs[i] = new byte[][] {rows.keys.get(i), rows.values.get(i)};
      }
      rows.keys.clear();
      rows.values.clear();
      Arrays.sort(pairs, Comparator.comparing((byte[][] pair) -> pair[0],
          Arrays::compareUnsigned));
      byte[][] sortedKeys = new byte[count][];
      for (int i = 0; i < count; i++) {
        sortedKeys[i] = pairs[i][0];
      }
      refuseRepeated(directory, sortedKeys);
      RocksDB.loadLibrary();
      Path scratch = Files.createTempDirectory(directory, ".sparkpoint-rewrite-");
      try {
        Path optionsFile = scratch.resolve("OPTIONS-000001");
        Files.writeString(optionsFile, rocksDbOptions, StandardCharsets.UTF_8);
        List<ColumnFamilyDescriptor> families = new ArrayList<>();
        try (ConfigOptions config = new ConfigOptions();
            DBOptions dbOptions = new DBOptions()) {
          // The store's own settings (compression, block size, bloom filter, table format):
          // the SST is written as the job's provider would write it.
          OptionsUtil.loadOptionsFromFile(config, optionsFile.toString(), dbOptions, families);
          try (Options options = new Options(dbOptions, families.get(0).getOptions())) {
            options.setCreateIfMissing(true).setDisableAutoCompactions(true);
            Path sst = scratch.resolve("pairs.sst");
            if (count > 0) {
              try (EnvOptions env = new EnvOptions();
                  SstFileWriter writer = new SstFileWriter(env, options)) {
                writer.open(sst.toString());
                for (byte[][] pair : pairs) {
                  writer.put(pair[0], pair[1]);
                }
                writer.finish();
              }
            }
            Path checkpoint = scratch.resolve("checkpoint");
            try (RocksDB db = RocksDB.open(options, scratch.resolve("db").toString())) {
              if (count > 0) {
                try (IngestExternalFileOptions moved = new IngestExternalFileOptions()) {
                  moved.setMoveFiles(true);
                  db.ingestExternalFile(List.of(sst.toString()), moved);
                }
              }
              try (Checkpoint maker = Checkpoint.create(db)) {
                maker.createCheckpoint(checkpoint.toString());
              }
            }
            ObjectMapper json = new ObjectMapper();
            ObjectNode metadata = (ObjectNode) json.readTree(rocksDbMetadata);
            metadata.put("numKeys", count);
            Path staging = Files.createDirectory(scratch.resolve("staging"));
            RocksDbVersionFiles.pack(json, checkpoint, staging, version, metadata);
            RocksDbVersionFiles.moveAll(staging, directory);
          } finally {
            for (ColumnFamilyDescriptor family : families) {
              family.getOptions().close();
            }
          }
        }
      } finally {
        RocksDbVersionFiles.deleteTree(scratch);
      }
    }

    /** The struct as an {@code UnsafeRow}: a shuffled row's nested struct already is one
     * (the same bytes a projection of it would give: its field offsets are relative to its
     * own start), else projected. */
    private static UnsafeRow unsafe(InternalRow struct, UnsafeProjection projection) {
      return struct instanceof UnsafeRow row ? row : projection.apply(struct);
    }

    /** The row's bytes in an array of their own, after {@code prefix} bytes of
     * {@code ENCODING_VERSION}: a projection reuses its row's buffer for the next row (and
     * {@code UnsafeRow.getBytes} returns that buffer when it fits). */
    private static byte[] copied(UnsafeRow row, int prefix) {
      byte[] bytes = new byte[prefix + row.getSizeInBytes()];
      if (prefix > 0) {
        bytes[0] = ENCODING_VERSION;
      }
      row.writeToMemory(bytes, Platform.BYTE_ARRAY_OFFSET + prefix);
      return bytes;
    }

    /** A key given twice refused, in keys sorted bytewise (equal keys are neighbours). */
    private static void refuseRepeated(Path directory, byte[][] sortedKeys) {
      long repeated = 0;
      for (int i = 1; i < sortedKeys.length; i++) {
        if (Arrays.equals(sortedKeys[i], sortedKeys[i - 1])) {
          repeated++;
        }
      }
      if (repeated > 0) {
        throw new StateWriteError(directory + ": expected one row per key of the state, found "
            + repeated + " key(s) given more than once (a seed query must give each key "
            + "once)");
      }
    }
  }
}
