package sparkpoint.spark;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * A SQL function from a struct to the bytes of its {@code UnsafeRow}: the form in which
 * Spark's HDFS-backed state store keeps a key.
 *
 * <p>Spark's state reader gives a key as its columns, and a condition on them is evaluated
 * by Spark; the HDFS-provider files hold the key as an {@code UnsafeRow}. Encoding the read
 * key again with Spark's own encoder for the key's schema gives those bytes, so tasks can
 * remove exactly the keys the condition selected (sparkpoint checks, per partition, that
 * each of them was found in the state files).
 */
public class UnsafeRowBytes implements UDF1<Row, byte[]> {
  private static final long serialVersionUID = 1L;

  private final String schemaJson;
  private transient ExpressionEncoder.Serializer<Row> serializer;

  /** @param schemaJson the key's schema, as {@code StructType.json()} gives it */
  public UnsafeRowBytes(String schemaJson) {
    this.schemaJson = schemaJson;
  }

  @Override
  public byte[] call(Row key) {
    if (key == null) {
      return null;
    }
    if (serializer == null) {
      StructType schema = (StructType) DataType.fromJson(schemaJson);
      // Lenient: timestamps and dates as either java.sql or java.time values.
      serializer = ExpressionEncoder.apply(schema, true).createSerializer();
    }
    return ((UnsafeRow) serializer.apply(key)).getBytes();
  }
}
