package sparkpoint.spark;

import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.CancellableFSDataOutputStream;

/**
 * Spark's checkpoint file manager for the locations a lease fences ({@link LeaseFences}):
 * every create, delete and directory made there is refused once the holder's deadline
 * passed; a file being written is cancelled instead of published when the deadline passes
 * before it is closed. Everything else goes to the manager Spark would have chosen (or to
 * the class named by {@code spark.sql.streaming.sparkpoint.delegateFileManagerClass}, a
 * user's own setting that sparkpoint moved aside).
 */
public class FencedCheckpointFileManager implements CheckpointFileManager {

  /** The setting Spark reads (SQLConf.STREAMING_CHECKPOINT_FILE_MANAGER_CLASS). */
  public static final String MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass";
  /** A manager the user had set, which this one delegates to. */
  public static final String DELEGATE_CONF =
      "spark.sql.streaming.sparkpoint.delegateFileManagerClass";

  private final CheckpointFileManager delegate;

  public FencedCheckpointFileManager(Path path, Configuration hadoopConf) {
    Configuration conf = new Configuration(hadoopConf);
    String own = hadoopConf.get(DELEGATE_CONF);
    if (own == null || own.isEmpty()) {
      conf.unset(MANAGER_CONF);
    } else {
      conf.set(MANAGER_CONF, own);
    }
    this.delegate = CheckpointFileManager.create(path, conf);
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    try {
      LeaseFences.check(path);
    } catch (IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
    return new FencedStream(delegate.createAtomic(path, overwriteIfPossible), path);
  }

  @Override
  public FSDataInputStream open(Path path) {
    return delegate.open(path);
  }

  @Override
  public FileStatus[] list(Path path, PathFilter filter) {
    return delegate.list(path, filter);
  }

  @Override
  public void mkdirs(Path path) {
    refuseLate(path);
    delegate.mkdirs(path);
  }

  @Override
  public boolean exists(Path path) {
    return delegate.exists(path);
  }

  @Override
  public void delete(Path path) {
    refuseLate(path);
    delegate.delete(path);
  }

  @Override
  public boolean isLocal() {
    return delegate.isLocal();
  }

  @Override
  public Path createCheckpointDirectory() {
    return delegate.createCheckpointDirectory();
  }

  @Override
  public void close() {
    delegate.close();
  }

  private static void refuseLate(Path path) {
    try {
      LeaseFences.check(path);
    } catch (IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  /** The delegate's stream, published at close only while the lease still holds. */
  static final class FencedStream extends CancellableFSDataOutputStream {
    private final CancellableFSDataOutputStream inner;
    private final Path path;

    FencedStream(CancellableFSDataOutputStream inner, Path path) {
      super(inner);
      this.inner = inner;
      this.path = path;
    }

    @Override
    public void close() throws IOException {
      if (LeaseFences.refuses(path)) {
        inner.cancel();
        LeaseFences.check(path);
      }
      inner.close();
    }

    @Override
    public void cancel() {
      inner.cancel();
    }
  }
}
