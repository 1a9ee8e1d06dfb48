package sparkpoint.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import java.util.zip.ZipEntry;
import java.util.zip.ZipFile;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeProjection;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.Platform;
import org.rocksdb.Checkpoint;
import org.rocksdb.ColumnFamilyDescriptor;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.CompactRangeOptions;
import org.rocksdb.ConfigOptions;
import org.rocksdb.DBOptions;
import org.rocksdb.FlushOptions;
import org.rocksdb.LiveFileMetaData;
import org.rocksdb.OptionsUtil;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.WriteBatch;
import org.rocksdb.WriteOptions;

/**
 * Removes the keys a condition selected from RocksDB state, in Spark tasks, with the RocksDB
 * Spark ships (rocksdbjni): the keys never leave the JVM.
 *
 * <p>The input is the matched keys as Spark's state reader gives them (the key's struct,
 * then the state partition), read one state partition per task, so a task's keys all belong
 * to one store. A task opens its partition's version as a database in a scratch directory
 * of the partition (the zip's files written there, its SSTs linked in: RocksDB never writes
 * an SST, and a compaction only unlinks the links), deletes the keys as Spark's
 * {@code NoPrefixKeyStateEncoder} stores them (an encoding version byte, then the key's
 * {@code UnsafeRow}), compacts everything into new SSTs (no delete left behind, so the store
 * is no larger than a rewrite of the kept keys), counts the keys left, and packs a RocksDB
 * checkpoint of it as Spark's {@code RocksDBFileManager} packs a commit: the SSTs under
 * {@code SSTs/<number>-<uuid>.sst}, the other files in {@code <version>.zip} with a
 * {@code metadata} that keeps every field of the old one but the SST list and
 * {@code numKeys}. Every other file of the partition but {@code _metadata} is removed: the
 * partition directory is a scratch copy holding that version only, its files links that
 * are unlinked, never written through.
 *
 * <p>A task reports its partition, how many keys it was given and how many the store lost
 * (its key count before, the version's recorded {@code numKeys} or counted when Spark
 * tracked none, less the keys counted after), for the caller to compare.
 */
public final class RocksDbKeyRemoval {
  // NoPrefixKeyStateEncoder's first byte of every stored key (STATE_ENCODING_VERSION).
  private static final byte ENCODING_VERSION = 0;
  // Keys deleted per write batch: bounds the memory a batch holds.
  private static final int DELETE_BATCH = 50_000;
  private static final String SCRATCH_PREFIX = ".sparkpoint-rewrite-";

  private RocksDbKeyRemoval() {}

  /**
   * Runs the removal as one Spark job and returns, flattened, a (partition, keys given, keys
   * removed) triple per partition that held matched keys.
   *
   * @param matched columns: the key's struct, the state partition (int)
   * @param operatorDir the operator's state directory (partitions below it), on a local file
   *     system every executor reaches
   * @param zipNames partition -> the zip of the version to rewrite, in its directory
   * @param version the version, which keeps its number
   */
  public static long[] run(Dataset<Row> matched, String operatorDir,
      Map<Integer, String> zipNames, long version, String keySchemaJson) {
    Task task = new Task(operatorDir, new HashMap<>(zipNames), version, keySchemaJson);
    List<long[]> done = matched.queryExecution().toRdd().toJavaRDD().mapPartitions(task)
        .collect();
    long[] flat = new long[done.size() * 3];
    for (int i = 0; i < done.size(); i++) {
      System.arraycopy(done.get(i), 0, flat, 3 * i, 3);
    }
    return flat;
  }

  private static final class Task implements FlatMapFunction<Iterator<InternalRow>, long[]> {
    private static final long serialVersionUID = 1L;

    private final String operatorDir;
    private final HashMap<Integer, String> zipNames;
    private final long version;
    private final String keySchemaJson;

    Task(String operatorDir, HashMap<Integer, String> zipNames, long version,
        String keySchemaJson) {
      this.operatorDir = operatorDir;
      this.zipNames = zipNames;
      this.version = version;
      this.keySchemaJson = keySchemaJson;
    }

    @Override
    public Iterator<long[]> call(Iterator<InternalRow> rows) throws Exception {
      if (!rows.hasNext()) {
        return Collections.emptyIterator();
      }
      InternalRow first = rows.next();
      int partition = first.getInt(1);
      String zipName = zipNames.get(partition);
      if (zipName == null) {
        throw new IllegalStateException("state partition " + partition
            + " has matched keys but no version to rewrite");
      }
      Path partitionDir = Paths.get(operatorDir, Integer.toString(partition));
      StructType keyType = (StructType) DataType.fromJson(keySchemaJson);
      Path scratch = Files.createTempDirectory(partitionDir, SCRATCH_PREFIX);
      try {
        long[] done = rewrite(partitionDir, partitionDir.resolve(zipName), scratch, partition,
            keyType, first, rows);
        List<long[]> result = new ArrayList<>(1);
        result.add(done);
        return result.iterator();
      } finally {
        RocksDbVersionFiles.deleteTree(scratch);
      }
    }

    private long[] rewrite(Path partitionDir, Path zip, Path scratch, int partition,
        StructType keyType, InternalRow first, Iterator<InternalRow> rows)
        throws IOException, RocksDBException {
      ObjectMapper json = new ObjectMapper();
      Path db = Files.createDirectory(scratch.resolve("db"));
      ObjectNode metadata = unpack(json, partitionDir, zip, db);
      RocksDB.loadLibrary();
      long given = 0;
      long before;
      long after;
      Path checkpoint = scratch.resolve("checkpoint");
      List<ColumnFamilyDescriptor> families = new ArrayList<>();
      List<ColumnFamilyHandle> handles = new ArrayList<>();
      try (ConfigOptions config = new ConfigOptions(); DBOptions dbOptions = new DBOptions()) {
        // The store's own settings (compression, block size, bloom filter, table format), as
        // Spark's RocksDB wrote them in the version's OPTIONS file: the new SSTs are written
        // as the job's would be.
        OptionsUtil.loadLatestOptions(config, db.toString(), dbOptions, families);
        for (ColumnFamilyDescriptor family : families) {
          family.getOptions().setDisableAutoCompactions(true);
        }
        try (RocksDB rocks = RocksDB.open(dbOptions, db.toString(), families, handles);
            WriteOptions unsynced = new WriteOptions().setDisableWAL(true)) {
          ColumnFamilyHandle keys = handles.get(0);
          // Spark trusts a version's numKeys when it tracked one (RocksDB.load reads it
          // back; -1 when trackTotalNumberOfRows was off): so does the rewrite.
          long recorded = metadata.path("numKeys").asLong(-1);
          before = recorded >= 0 ? recorded : entries(rocks, keys, zip);
          UnsafeProjection toUnsafe = UnsafeProjection.create(keyType);
          int width = keyType.length();
          WriteBatch batch = new WriteBatch();
          try {
            InternalRow row = first;
            while (true) {
              if (row.getInt(1) != partition) {
                throw new IllegalStateException("state partitions " + partition + " and "
                    + row.getInt(1) + " were read in one task; expected one per task");
              }
              batch.delete(keys, storedKey(row.getStruct(0, width), toUnsafe));
              given++;
              if (batch.count() >= DELETE_BATCH) {
                rocks.write(unsynced, batch);
                batch.close();
                batch = new WriteBatch();
              }
              if (!rows.hasNext()) {
                break;
              }
              row = rows.next();
            }
            rocks.write(unsynced, batch);
          } finally {
            batch.close();
          }
          after = entries(rocks, keys, zip);
          try (Checkpoint maker = Checkpoint.create(rocks)) {
            maker.createCheckpoint(checkpoint.toString());
          }
        } finally {
          for (ColumnFamilyHandle handle : handles) {
            handle.close();
          }
          for (ColumnFamilyDescriptor family : families) {
            family.getOptions().close();
          }
        }
      }
      Path staging = Files.createDirectory(scratch.resolve("staging"));
      metadata.put("numKeys", after);
      RocksDbVersionFiles.pack(json, checkpoint, staging, version, metadata);
      replacePartitionFiles(partitionDir);
      RocksDbVersionFiles.moveAll(staging, partitionDir);
      return new long[] {partition, given, before - after};
    }

    /** The key as the store holds it: the encoding version byte, then the UnsafeRow. */
    private static byte[] storedKey(InternalRow key, UnsafeProjection toUnsafe) {
      // The reader's key is normally an UnsafeRow already (its bytes are the stored key's);
      // any other row is encoded by Spark's projection for the key's schema.
      UnsafeRow row = key instanceof UnsafeRow ? (UnsafeRow) key : toUnsafe.apply(key);
      byte[] stored = new byte[1 + row.getSizeInBytes()];
      stored[0] = ENCODING_VERSION;
      row.writeToMemory(stored, Platform.BYTE_ARRAY_OFFSET + 1);
      return stored;
    }

    /** The zip's files (but {@code metadata}) written into {@code db}, each SST the metadata
     * lists linked in under the name RocksDB's MANIFEST knows it by; returns the metadata. */
    private static ObjectNode unpack(ObjectMapper json, Path partitionDir, Path zip, Path db)
        throws IOException {
      ObjectNode metadata = null;
      try (ZipFile archive = new ZipFile(zip.toFile())) {
        Enumeration<? extends ZipEntry> members = archive.entries();
        while (members.hasMoreElements()) {
          ZipEntry member = members.nextElement();
          String name = member.getName();
          if (name.contains("/")) {
            continue;
          }
          try (InputStream in = archive.getInputStream(member)) {
            if (name.equals("metadata")) {
              String text = new String(in.readAllBytes(), StandardCharsets.UTF_8);
              if (!text.startsWith("v1\n")) {
                throw new IOException(zip + ": expected a metadata file of version v1");
              }
              metadata = (ObjectNode) json.readTree(text.substring(3));
            } else {
              Files.copy(in, db.resolve(name));
            }
          }
        }
      }
      if (metadata == null) {
        throw new IOException(zip + ": expected a metadata file, found none");
      }
      for (JsonNode sst : metadata.path("sstFiles")) {
        Path target = partitionDir.resolve("SSTs").resolve(sst.get("dfsSstFileName").asText())
            .toAbsolutePath();
        Files.createSymbolicLink(db.resolve(sst.get("localFileName").asText()), target);
      }
      return metadata;
    }

    /** The keys in the database, exactly: its SSTs' entries once one compaction of
     * everything left a single sorted run without deletes (skipped when the store already is
     * one SST without deletes and nothing is in its memtable). */
    private static long entries(RocksDB rocks, ColumnFamilyHandle keys, Path where)
        throws RocksDBException, IOException {
      List<LiveFileMetaData> files = rocks.getLiveFilesMetaData();
      if (files.size() > 1 || files.stream().anyMatch(f -> f.numDeletions() > 0)
          || rocks.getLongProperty(keys, "rocksdb.num-entries-active-mem-table") > 0) {
        try (FlushOptions flush = new FlushOptions().setWaitForFlush(true);
            CompactRangeOptions everything = new CompactRangeOptions()
                .setBottommostLevelCompaction(
                    CompactRangeOptions.BottommostLevelCompaction.kForce)) {
          // Forced: a file of deletes that overlaps no other file would otherwise only be
          // moved to the last level, its deletes kept.
          rocks.flush(flush, keys);
          rocks.compactRange(keys, null, null, everything);
        }
        files = rocks.getLiveFilesMetaData();
      }
      if (files.stream().anyMatch(f -> f.numDeletions() > 0)) {
        throw new IOException(where + ": expected no delete left after compacting the store, "
            + "found some; nothing was published");
      }
      return files.stream().mapToLong(LiveFileMetaData::numEntries).sum();
    }

    /** Unlinks every file of the partition but its {@code _metadata} and the scratch. */
    private static void replacePartitionFiles(Path partitionDir) throws IOException {
      try (Stream<Path> entries = Files.list(partitionDir)) {
        for (Path entry : (Iterable<Path>) entries::iterator) {
          String name = entry.getFileName().toString();
          if (!name.equals("_metadata") && !name.startsWith(SCRATCH_PREFIX)) {
            RocksDbVersionFiles.deleteTree(entry);
          }
        }
      }
    }
  }
}
