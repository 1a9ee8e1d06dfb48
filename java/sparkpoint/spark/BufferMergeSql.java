package sparkpoint.spark;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.catalyst.analysis.UnresolvedAttribute;
import org.apache.spark.sql.catalyst.expressions.AttributeReference;
import org.apache.spark.sql.catalyst.expressions.ExprId;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction;
import org.apache.spark.sql.catalyst.expressions.aggregate.DeclarativeAggregate;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * Spark's own merge of two aggregation buffers of one aggregate function, as Spark SQL.
 *
 * <p>A {@code DeclarativeAggregate} merges a buffer with another by its {@code
 * mergeExpressions}, one per buffer column, over its {@code aggBufferAttributes} (the left
 * buffer) and {@code inputAggBufferAttributes} (the right one). Each expression is given here
 * with those attributes replaced by the names {@code __left_i} and {@code __right_i} (i: the
 * buffer column), so that the caller can place the two buffers' columns in a SQL expression
 * that folds the buffers of groups merged into one (counts and sums add, min and max take
 * the extreme, an average adds its sums and counts). An imperative aggregate (its buffer an
 * object Spark serializes) has no such expressions: {@code null}.
 */
public final class BufferMergeSql {
  private BufferMergeSql() {}

  public static String[] of(AggregateFunction function) {
    if (!(function instanceof DeclarativeAggregate)) {
      return null;
    }
    DeclarativeAggregate declarative = (DeclarativeAggregate) function;
    Map<ExprId, String> names = new HashMap<>();
    name(names, declarative.aggBufferAttributes(), "__left_");
    name(names, declarative.inputAggBufferAttributes(), "__right_");
    List<Expression> merges = CollectionConverters.asJava(declarative.mergeExpressions());
    String[] found = new String[merges.size()];
    for (int i = 0; i < found.length; i++) {
      found[i] = merges.get(i).transform(new Renaming(names)).sql();
    }
    return found;
  }

  private static void name(Map<ExprId, String> names,
                           scala.collection.Seq<AttributeReference> attributes, String prefix) {
    List<AttributeReference> list = CollectionConverters.asJava(attributes);
    for (int i = 0; i < list.size(); i++) {
      names.put(list.get(i).exprId(), prefix + i);
    }
  }

  /** Each buffer attribute to an unresolved column of its given name. */
  private static final class Renaming extends AbstractPartialFunction<Expression, Expression> {
    private final Map<ExprId, String> names;

    Renaming(Map<ExprId, String> names) {
      this.names = names;
    }

    @Override
    public boolean isDefinedAt(Expression expression) {
      return expression instanceof AttributeReference
          && names.containsKey(((AttributeReference) expression).exprId());
    }

    @Override
    public Expression apply(Expression expression) {
      List<String> parts = new ArrayList<>();
      parts.add(names.get(((AttributeReference) expression).exprId()));
      return new UnresolvedAttribute(CollectionConverters.asScala(parts).toSeq());
    }
  }
}
